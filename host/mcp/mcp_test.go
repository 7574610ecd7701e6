package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/schema"
)

// fakeProcesses runs nothing: Create answers with pid 1, Follow with
// replay and then live (closed after; never, when running is set: the
// program runs until killed), Wait with final. Kill is told on kills.
type fakeProcesses struct {
	mu        sync.Mutex
	createErr error
	waitErr   error
	final     process.Process
	replay    []process.Event
	live      []process.Event
	created   []process.CreateInput
	waited    []time.Duration
	killed    []int64
	running   chan struct{} // closed by Follow when set
	kills     chan int64    // told each kill when set
}

func (f *fakeProcesses) Create(_ context.Context, in process.CreateInput) (*process.Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, in)
	if f.createErr != nil {
		return nil, f.createErr
	}
	timeout := in.TimeoutMs
	if timeout == 0 {
		timeout = 30000
	}
	return &process.Process{ProcessSummary: process.ProcessSummary{PID: 1, State: process.Running, TimeoutMs: timeout}}, nil
}

func (f *fakeProcesses) Wait(_ context.Context, _ int64, timeout time.Duration) (*process.Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.waited = append(f.waited, timeout)
	p := f.final
	return &p, f.waitErr
}

func (f *fakeProcesses) Kill(_ context.Context, pid int64) (*process.Process, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killed = append(f.killed, pid)
	if f.kills != nil {
		f.kills <- pid
	}
	return &process.Process{ProcessSummary: process.ProcessSummary{PID: pid}}, nil
}

// seen is what the endpoint asked, read under the lock the handlers write
// under.
func (f *fakeProcesses) seen() (created []process.CreateInput, waited []time.Duration, killed []int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.created), slices.Clone(f.waited), slices.Clone(f.killed)
}

func (f *fakeProcesses) Follow(context.Context, int64) ([]process.Event, <-chan process.Event, func(), error) {
	next := make(chan process.Event, len(f.live))
	for _, ev := range f.live {
		next <- ev
	}
	if f.running != nil {
		close(f.running)
		return f.replay, next, func() {}, nil
	}
	close(next)
	return f.replay, next, func() {}, nil
}

func (f *fakeProcesses) Displays(context.Context, int64) ([]process.Display, error) { return nil, nil }

type fakeEnv struct{ module.Environment }

func (fakeEnv) Docs(context.Context) (string, error) {
	return "Write Python; call cyrnel.output().", nil
}

type fakeEnvironments struct{ err error }

func (f fakeEnvironments) Active() (module.Environment, error) {
	if f.err != nil {
		return nil, f.err
	}
	return fakeEnv{}, nil
}

// fakeTools answers every search with its tools, ranked as they stand,
// and records the query and limit it was asked.
type fakeTools struct {
	mu      sync.Mutex
	tools   []Tool
	query   string
	limit   int
	docsErr error
}

func (f *fakeTools) SearchTools(_ context.Context, query string, limit int) ([]Tool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.query, f.limit = query, limit
	return f.tools[:min(limit, len(f.tools))], nil
}

func (f *fakeTools) asked() (string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.query, f.limit
}

func (f *fakeTools) failDocs(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.docsErr = err
}

func (f *fakeTools) ToolDocs(_ context.Context, serviceID, toolID string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.docsErr != nil {
		return "", f.docsErr
	}
	return "docs of " + serviceID + "." + toolID, nil
}

// connect serves the endpoint on loopback and returns a client session.
func connect(t *testing.T, d Deps) *mcp.ClientSession {
	t.Helper()
	if d.Log == nil {
		d.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	h := New(d, Options{})
	srv := httptest.NewServer(asKey(h, "k1"))
	t.Cleanup(func() { h.Close(); srv.Close() })
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func call(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, string) {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return res, b.String()
}

// asKey serves h as host/api does for a runner key: authenticated, with
// the caller in the request's context.
func asKey(h http.Handler, id string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Set("Authorization", "Bearer "+id)
		h.ServeHTTP(w, r.WithContext(caller.With(r.Context(), caller.Caller{KeyID: id, Roles: []caller.Role{caller.Runner}})))
	})
}

func ptr[T any](v T) *T { return &v }

// TestRunCodeReportsHowItEnded: the program runs under ref mcp with the
// timeout asked, waited for past it by the grace; the result carries the
// structured fields and a text summary; only success is not an error.
func TestRunCodeReportsHowItEnded(t *testing.T) {
	t.Parallel()
	procs := &fakeProcesses{final: process.Process{
		ProcessSummary: process.ProcessSummary{PID: 1, State: process.Idle, ExitState: ptr("success"), Reason: ptr("completed"), DurationMs: ptr(int64(12))},
		Output:         map[string]any{"n": 2}, Stdout: "hello\n",
	}}
	s := connect(t, Deps{Processes: procs, Environments: fakeEnvironments{}, Tools: &fakeTools{}})
	res, text := call(t, s, "run_code", map[string]any{"code": "print('hello')", "timeoutMs": 2000})
	if res.IsError {
		t.Fatalf("success reported as an error: %s", text)
	}
	created, waited, _ := procs.seen()
	if in := created[0]; in.Code != "print('hello')" || in.Ref != "mcp" || in.TimeoutMs != 2000 || !in.Autorun {
		t.Errorf("create %+v", in)
	}
	if len(waited) == 0 || waited[0] != 2*time.Second+waitGrace {
		t.Errorf("waited %v, want the timeout and the grace first", waited)
	}
	if !strings.Contains(text, "exit: success (completed)") || !strings.Contains(text, `output: {"n":2}`) || !strings.Contains(text, "stdout:\nhello") {
		t.Errorf("text %q", text)
	}
	got, _ := res.StructuredContent.(map[string]any)
	if got["pid"] != 1.0 || got["state"] != "idle" || got["exitState"] != "success" || got["durationMs"] != 12.0 || got["stdout"] != "hello\n" {
		t.Errorf("structured %v", got)
	}

	procs.final = process.Process{ProcessSummary: process.ProcessSummary{PID: 1, State: process.Idle, ExitState: ptr("failed"), Reason: ptr("exception"), Error: "ValueError: boom"}}
	res, text = call(t, s, "run_code", map[string]any{"code": "raise ValueError('boom')"})
	if !res.IsError || !strings.HasPrefix(text, "exit: failed (exception): ValueError: boom") {
		t.Errorf("failure: isError %v, text %q", res.IsError, text)
	}
	if got, _ := res.StructuredContent.(map[string]any); fmt.Sprint(got["output"]) != "map[]" {
		t.Errorf("output of a run that wrote none: %v, want {}", got["output"])
	}
}

// TestRunCodeReportsPendingApprovals: a program suspended on an approval
// is not an error and not killed; the result names the approval and who
// decides it.
func TestRunCodeReportsPendingApprovals(t *testing.T) {
	t.Parallel()
	apr := map[string]any{"id": "apr_1", "serviceId": "pets", "toolId": "addPet"}
	procs := &fakeProcesses{live: []process.Event{{Type: process.EventStdout, Text: "asking"}, {Type: process.EventApproval, Approval: apr}}}
	s := connect(t, Deps{Processes: procs, Environments: fakeEnvironments{}, Tools: &fakeTools{}})
	res, text := call(t, s, "run_code", map[string]any{"code": "cyrnel.services.pets.addPet()"})
	if _, _, killed := procs.seen(); res.IsError || !strings.Contains(text, "process 1 is suspended") || !strings.Contains(text, `"id":"apr_1"`) || len(killed) != 0 {
		t.Errorf("isError %v, killed %v, text %q", res.IsError, killed, text)
	}
	got, _ := res.StructuredContent.(map[string]any)
	if fmt.Sprint(got["pendingApprovals"]) != "[map[id:apr_1 serviceId:pets toolId:addPet]]" || got["state"] != "suspended" || got["exitState"] != nil || !strings.Contains(text, "wait_process with pid 1") {
		t.Errorf("structured %v", got)
	}
}

// TestRunCodeNamesBadArguments: a field the process refuses is named as
// run_code's argument, never as an HTTP location (the old code said
// "run_code: body.timeoutMs: …").
func TestRunCodeNamesBadArguments(t *testing.T) {
	t.Parallel()
	procs := &fakeProcesses{createErr: &schema.FieldError{Field: "timeoutMs", Message: "must be between 1 and 300000"}}
	s := connect(t, Deps{Processes: procs, Environments: fakeEnvironments{}, Tools: &fakeTools{}})
	res, text := call(t, s, "run_code", map[string]any{"code": "x", "timeoutMs": 999999999})
	if !res.IsError || text != "run_code: invalid argument timeoutMs: must be between 1 and 300000" {
		t.Errorf("isError %v, text %q", res.IsError, text)
	}
	res, text = call(t, s, "run_code", map[string]any{"code": "  \n"})
	if created, _, _ := procs.seen(); !res.IsError || !strings.Contains(text, "code is empty") || len(created) != 1 {
		t.Errorf("empty code: isError %v, text %q, %d created", res.IsError, text, len(created))
	}
}

// TestRunCodeKillsWhatItGaveUpOn: a failed wait, or a wait that ends with
// the process still running, kills it and is an error.
func TestRunCodeKillsWhatItGaveUpOn(t *testing.T) {
	t.Parallel()
	for _, procs := range []*fakeProcesses{
		{waitErr: errors.New("store gone"), final: process.Process{ProcessSummary: process.ProcessSummary{PID: 1}}},
		{final: process.Process{ProcessSummary: process.ProcessSummary{PID: 1, State: process.Running}}},
	} {
		s := connect(t, Deps{Processes: procs, Environments: fakeEnvironments{}, Tools: &fakeTools{}})
		res, text := call(t, s, "run_code", map[string]any{"code": "while True: pass"})
		if !res.IsError || !strings.Contains(text, "process 1") {
			t.Errorf("isError %v, text %q", res.IsError, text)
		}
		if _, _, killed := procs.seen(); !slices.Equal(killed, []int64{1}) {
			t.Errorf("killed %v, want [1]", killed)
		}
	}
}

// TestRunCodeDescriptionCarriesTheGuide of the active environment, and
// says so when there is none.
func TestRunCodeDescriptionCarriesTheGuide(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		envs fakeEnvironments
		want string
	}{
		{fakeEnvironments{}, "Write Python; call cyrnel.output()."},
		{fakeEnvironments{err: errors.New("no active environment")}, "guide is unavailable: no active environment"},
	} {
		s := connect(t, Deps{Processes: &fakeProcesses{}, Environments: c.envs, Tools: &fakeTools{}})
		list, err := s.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tool := range list.Tools {
			names = append(names, tool.Name)
			if tool.Name == "run_code" && !strings.Contains(tool.Description, c.want) {
				t.Errorf("run_code description lacks %q: %s", c.want, tool.Description)
			}
		}
		slices.Sort(names)
		if fmt.Sprint(names) != "[environment_docs kill_process run_code search_tools tool_docs wait_process]" {
			t.Errorf("tools %v", names)
		}
		res, text := call(t, s, "environment_docs", nil)
		if res.IsError != (c.envs.err != nil) || (c.envs.err == nil && text != "Write Python; call cyrnel.output().") {
			t.Errorf("environment_docs: isError %v, text %q", res.IsError, text)
		}
	}
}

// TestSearchTools passes the query to the host, which ranks; limit is 10
// by default and at most 50; includeDocs adds each tool's docs, and a docs
// failure fails the search.
func TestSearchTools(t *testing.T) {
	t.Parallel()
	tools := &fakeTools{tools: []Tool{
		{ServiceID: "pets", ToolID: "getPetById", Name: "Find pet by ID", Score: 2.5},
		{ServiceID: "pets", ToolID: "addPet", Name: "Add a pet", Score: 1},
		{ServiceID: "store", ToolID: "getOrderById", Name: "Find order by ID", Score: 0.5},
	}}
	s := connect(t, Deps{Processes: &fakeProcesses{}, Environments: fakeEnvironments{}, Tools: tools})
	res, _ := call(t, s, "search_tools", map[string]any{"query": "pet by id", "limit": 2})
	q, limit := tools.asked()
	if got := ids(t, res); fmt.Sprint(got) != "[pets.getPetById pets.addPet]" || q != "pet by id" || limit != 2 {
		t.Errorf("results %v for %q limit %d", got, q, limit)
	}
	if first := res.StructuredContent.(map[string]any)["tools"].([]any)[0].(map[string]any); first["score"] != 2.5 {
		t.Errorf("first result %v lacks its score", first)
	}
	for limit, want := range map[int]int{0: 10, 500: 50} {
		call(t, s, "search_tools", map[string]any{"limit": limit})
		if _, got := tools.asked(); got != want {
			t.Errorf("limit %d reached the host as %d, want %d", limit, got, want)
		}
	}
	res, _ = call(t, s, "search_tools", map[string]any{"includeDocs": true})
	for _, r := range res.StructuredContent.(map[string]any)["tools"].([]any) {
		m := r.(map[string]any)
		if m["docs"] != "docs of "+m["serviceId"].(string)+"."+m["toolId"].(string) {
			t.Errorf("docs %v", m)
		}
	}
	tools.failDocs(errors.New("no active environment"))
	if res, text := call(t, s, "search_tools", map[string]any{"includeDocs": true}); !res.IsError || !strings.Contains(text, "search_tools: no active environment") {
		t.Errorf("docs failure: isError %v, text %q", res.IsError, text)
	}
	if res, text := call(t, s, "tool_docs", map[string]any{"serviceId": "pets", "toolId": "addPet"}); !res.IsError || text != "tool_docs: no active environment" {
		t.Errorf("tool_docs failure: isError %v, text %q", res.IsError, text)
	}
	tools.failDocs(nil)
	if res, text := call(t, s, "tool_docs", map[string]any{"serviceId": "pets", "toolId": "addPet"}); res.IsError || text != "docs of pets.addPet" {
		t.Errorf("tool_docs: isError %v, text %q", res.IsError, text)
	}
}

func ids(t *testing.T, res *mcp.CallToolResult) []string {
	t.Helper()
	if res.IsError {
		t.Fatalf("search_tools failed: %+v", res.Content)
	}
	var out []string
	for _, r := range res.StructuredContent.(map[string]any)["tools"].([]any) {
		m := r.(map[string]any)
		out = append(out, m["serviceId"].(string)+"."+m["toolId"].(string))
	}
	return out
}

// TestWaitAndKillProcess: wait_process waits as long as asked (30 s by
// default, at most 10 min) and reports a program still running as such,
// not as an error; kill_process kills and reports how it ended.
func TestWaitAndKillProcess(t *testing.T) {
	t.Parallel()
	procs := &fakeProcesses{final: process.Process{ProcessSummary: process.ProcessSummary{PID: 3, State: process.Suspended}}}
	s := connect(t, Deps{Processes: procs, Environments: fakeEnvironments{}, Tools: &fakeTools{}})
	res, text := call(t, s, "wait_process", map[string]any{"pid": 3})
	if got, _ := res.StructuredContent.(map[string]any); res.IsError || got["state"] != "suspended" || got["exitState"] != nil || !strings.Contains(text, "process 3 is suspended") {
		t.Errorf("waiting on a suspended program: isError %v %v %q", res.IsError, got, text)
	}
	call(t, s, "wait_process", map[string]any{"pid": 3, "timeoutMs": 5000})
	call(t, s, "wait_process", map[string]any{"pid": 3, "timeoutMs": 99999999})
	if _, waited, _ := procs.seen(); fmt.Sprint(waited) != "[30s 5s 10m0s]" {
		t.Errorf("waited %v", waited)
	}
	if res, text := call(t, s, "wait_process", map[string]any{"pid": 3, "timeoutMs": -1}); !res.IsError || !strings.Contains(text, "timeoutMs") {
		t.Errorf("a negative timeout: isError %v %q", res.IsError, text)
	}

	procs.mu.Lock()
	procs.final = process.Process{ProcessSummary: process.ProcessSummary{PID: 3, State: process.Idle, ExitState: ptr("canceled"), Reason: ptr("killed")}}
	procs.mu.Unlock()
	res, text = call(t, s, "kill_process", map[string]any{"pid": 3})
	if _, _, killed := procs.seen(); !res.IsError || !strings.HasPrefix(text, "exit: canceled (killed)") || !slices.Equal(killed, []int64{3}) {
		t.Errorf("kill_process: isError %v %q, killed %v", res.IsError, text, killed)
	}
}
