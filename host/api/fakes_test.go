package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/humatest"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/audit"
	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/changes"
	"github.com/cyrnel/cyrnel/host/gate"
	"github.com/cyrnel/cyrnel/host/keys"
	"github.com/cyrnel/cyrnel/host/modules"
	"github.com/cyrnel/cyrnel/host/policy"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/services"
	"github.com/cyrnel/cyrnel/host/session"
	"github.com/cyrnel/cyrnel/host/store"
)

// The fakes below stand in for the domain packages: each keeps what it was
// asked in a field the test reads, answers from plain data, and returns err
// from every call when it is set, so a test can put any domain error in
// front of an operation and read the problem the API makes of it.

type fakeProcesses struct {
	procs   []*process.Process // oldest first
	err     error
	created process.CreateInput
	listed  process.ListInput
	waited  time.Duration
	forced  bool
	replay  []process.Event
	live    chan process.Event // nil: the process is not running
	stopped chan struct{}      // closed when a follower stops
}

func (f *fakeProcesses) get(pid int64) (*process.Process, error) {
	if f.err != nil {
		return nil, f.err
	}
	for _, p := range f.procs {
		if p.PID == pid {
			return p, nil
		}
	}
	return nil, fmt.Errorf("process %d: %w", pid, process.ErrNotFound)
}

func (f *fakeProcesses) Create(_ context.Context, in process.CreateInput) (*process.Process, error) {
	f.created = in
	if f.err != nil {
		return nil, f.err
	}
	p := &process.Process{ProcessSummary: process.ProcessSummary{PID: int64(len(f.procs) + 1), Ref: in.Ref, State: process.Idle, TimeoutMs: in.TimeoutMs}, Code: in.Code}
	f.procs = append(f.procs, p)
	return p, nil
}

func (f *fakeProcesses) List(_ context.Context, in process.ListInput) ([]process.ProcessSummary, bool, error) {
	f.listed = in
	if f.err != nil {
		return nil, false, f.err
	}
	var out []process.ProcessSummary
	for _, p := range slices.Backward(f.procs) {
		if in.BeforePID == 0 || p.PID < in.BeforePID {
			out = append(out, p.ProcessSummary)
		}
	}
	if len(out) > in.Limit {
		return out[:in.Limit], true, nil
	}
	return out, false, nil
}

func (f *fakeProcesses) Get(_ context.Context, pid int64) (*process.Process, error) {
	return f.get(pid)
}

func (f *fakeProcesses) Wait(_ context.Context, pid int64, timeout time.Duration) (*process.Process, error) {
	f.waited = timeout
	return f.get(pid)
}

func (f *fakeProcesses) Kill(_ context.Context, pid int64) (*process.Process, error) {
	return f.get(pid)
}

func (f *fakeProcesses) Run(_ context.Context, pid int64, force bool) (*process.Process, error) {
	f.forced = force
	return f.get(pid)
}

func (f *fakeProcesses) Delete(_ context.Context, pid int64) error {
	_, err := f.get(pid)
	return err
}

func (f *fakeProcesses) Follow(_ context.Context, pid int64) ([]process.Event, <-chan process.Event, func(), error) {
	if _, err := f.get(pid); err != nil {
		return nil, nil, nil, err
	}
	stop := func() {
		if f.stopped != nil {
			close(f.stopped)
		}
	}
	if f.live == nil {
		return f.replay, nil, stop, nil
	}
	return f.replay, f.live, stop, nil
}

func (f *fakeProcesses) Files(_ context.Context, pid int64) ([]process.OutputFile, error) {
	_, err := f.get(pid)
	return nil, err
}

func (f *fakeProcesses) File(_ context.Context, pid int64, _ string) (int64, io.Reader, error) {
	_, err := f.get(pid)
	return 0, nil, err
}

func (f *fakeProcesses) Displays(_ context.Context, pid int64) ([]process.Display, error) {
	_, err := f.get(pid)
	return nil, err
}

// fakeEnv is an active environment that writes docs; the rest of
// module.Environment is never called by the API.
type fakeEnv struct {
	module.Environment
	docsErr error
	docsFor module.ToolDocsInput
}

func (e *fakeEnv) Docs(context.Context) (string, error) { return "# Writing programs", e.docsErr }

func (e *fakeEnv) ToolDocs(_ context.Context, in module.ToolDocsInput) (string, error) {
	e.docsFor = in
	return "## " + in.ServiceID + "." + in.ToolID, e.docsErr
}

type fakeEnvironment struct {
	active    *modules.EnvStatus
	draining  []modules.EnvStatus
	setupErr  string
	env       *fakeEnv
	err       error
	activated string
}

func (f *fakeEnvironment) Status() (*modules.EnvStatus, []modules.EnvStatus, string) {
	return f.active, f.draining, f.setupErr
}

func (f *fakeEnvironment) Activate(_ context.Context, id string) error {
	f.activated = id
	if f.err != nil {
		return f.err
	}
	f.active = &modules.EnvStatus{Module: id}
	return nil
}

func (f *fakeEnvironment) Active() (module.Environment, error) {
	if f.env == nil {
		return nil, modules.ErrNoEnvironment
	}
	return f.env, nil
}

// fakeSettings keeps configs and secrets by id.
type fakeSettings struct {
	configs map[string]map[string]any
	secrets map[string][]string
	err     error
}

func (f *fakeSettings) Config(_ context.Context, id string) (map[string]any, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.configs[id], nil
}

func (f *fakeSettings) SetConfig(_ context.Context, id string, cfg map[string]any) (map[string]any, error) {
	if f.err != nil {
		return nil, f.err
	}
	if f.configs == nil {
		f.configs = map[string]map[string]any{}
	}
	f.configs[id] = cfg
	return cfg, nil
}

func (f *fakeSettings) SecretsSet(_ context.Context, id string) ([]string, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.secrets[id], nil
}

func (f *fakeSettings) SetSecrets(_ context.Context, id string, sec map[string]any) ([]string, error) {
	if f.err != nil {
		return nil, f.err
	}
	set := []string{}
	for k := range sec {
		set = append(set, "/"+k)
	}
	slices.Sort(set)
	return set, nil
}

type fakeModules struct {
	fakeSettings
	views []modules.ModuleView
}

func (f *fakeModules) Modules(context.Context) ([]modules.ModuleView, error) { return f.views, f.err }

func (f *fakeModules) Module(_ context.Context, id string) (modules.ModuleView, error) {
	if f.err != nil {
		return modules.ModuleView{}, f.err
	}
	for _, v := range f.views {
		if v.Info.ID == id {
			return v, nil
		}
	}
	return modules.ModuleView{}, fmt.Errorf("%s: %w", id, modules.ErrUnknownModule)
}

func (f *fakeModules) SetEnabled(ctx context.Context, id string, enabled bool) (modules.ModuleView, error) {
	v, err := f.Module(ctx, id)
	v.Enabled = enabled
	return v, err
}

type fakeServices struct {
	fakeSettings
	svcs    []*services.Service
	created services.CreateInput
}

func (f *fakeServices) Create(_ context.Context, in services.CreateInput) (*services.Service, error) {
	f.created = in
	if f.err != nil {
		return nil, f.err
	}
	s := &services.Service{ID: in.ID, Adapter: in.Adapter, Enabled: true, Config: in.Config}
	f.svcs = append(f.svcs, s)
	return s, nil
}

func (f *fakeServices) List(context.Context) ([]*services.Service, error) { return f.svcs, f.err }

func (f *fakeServices) Get(_ context.Context, id string) (*services.Service, error) {
	if f.err != nil {
		return nil, f.err
	}
	for _, s := range f.svcs {
		if s.ID == id {
			return s, nil
		}
	}
	return nil, fmt.Errorf("service %s: %w", id, services.ErrNotFound)
}

func (f *fakeServices) SetEnabled(ctx context.Context, id string, enabled bool) (*services.Service, error) {
	s, err := f.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	s.Enabled = enabled
	return s, nil
}

func (f *fakeServices) Delete(ctx context.Context, id string) error {
	_, err := f.Get(ctx, id)
	return err
}

func (f *fakeServices) Refresh(ctx context.Context, id string) (*services.RefreshResult, error) {
	s, err := f.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return &services.RefreshResult{Service: s, Added: []string{"newOp"}, Removed: []string{}}, nil
}

type fakeTools struct {
	tools    []services.Tool // sorted by service id, then tool id
	err      error
	listed   services.ToolListInput
	searched services.SearchInput
}

func (f *fakeTools) Tools(_ context.Context, in services.ToolListInput) ([]services.ToolSummary, bool, error) {
	f.listed = in
	if f.err != nil {
		return nil, false, f.err
	}
	var out []services.ToolSummary
	for _, t := range f.tools {
		if in.After == ([2]string{}) || t.ServiceID > in.After[0] || t.ServiceID == in.After[0] && t.ID > in.After[1] {
			out = append(out, t.ToolSummary)
		}
	}
	if len(out) > in.Limit {
		return out[:in.Limit], true, nil
	}
	return out, false, nil
}

func (f *fakeTools) Tool(_ context.Context, serviceID, toolID string) (*services.Tool, error) {
	if f.err != nil {
		return nil, f.err
	}
	for i, t := range f.tools {
		if t.ServiceID == serviceID && t.ID == toolID {
			return &f.tools[i], nil
		}
	}
	return nil, fmt.Errorf("tool %s.%s: %w", serviceID, toolID, services.ErrNotFound)
}

func (f *fakeTools) SetToolEnabled(ctx context.Context, serviceID, toolID string, enabled bool) (*services.Tool, error) {
	t, err := f.Tool(ctx, serviceID, toolID)
	if err != nil {
		return nil, err
	}
	t.Enabled = enabled
	return t, nil
}

// Search scores every tool whose id contains the query by its position,
// best first, and pages by offset.
func (f *fakeTools) Search(_ context.Context, in services.SearchInput) ([]services.ScoredTool, bool, error) {
	f.searched = in
	if f.err != nil {
		return nil, false, f.err
	}
	var out []services.ScoredTool
	for i, t := range f.tools {
		if strings.Contains(t.ID, in.Query) {
			out = append(out, services.ScoredTool{ToolSummary: t.ToolSummary, Score: float64(len(f.tools) - i)})
		}
	}
	out = out[min(in.Offset, len(out)):]
	if len(out) > in.Limit {
		return out[:in.Limit], true, nil
	}
	return out, false, nil
}

type fakeGate struct {
	invoked module.InvokeInput
	src     gate.Source
	result  any
	err     error
}

func (f *fakeGate) Invoke(_ context.Context, src gate.Source, in module.InvokeInput) (any, error) {
	f.src, f.invoked = src, in
	return f.result, f.err
}

// fakePolicies decides block for tools named z, allow for the others.
type fakePolicies struct {
	set policy.Set
	err error
}

func (f *fakePolicies) Get() *policy.Set { return &f.set }

func (f *fakePolicies) Put(_ context.Context, s policy.Set) (*policy.Set, error) {
	if f.err != nil {
		return nil, f.err
	}
	f.set = s
	return &f.set, nil
}

func (f *fakePolicies) Decide(_, toolID string) policy.Decision {
	if toolID == "z" {
		return policy.Block
	}
	return policy.Allow
}

type fakeApprovals struct {
	items  []approval.Approval // newest first
	err    error
	listed approval.ListInput
}

func (f *fakeApprovals) List(_ context.Context, in approval.ListInput) ([]approval.Approval, bool, error) {
	f.listed = in
	if f.err != nil {
		return nil, false, f.err
	}
	var out []approval.Approval
	for _, a := range f.items {
		if in.Before == "" || a.ID < in.Before {
			out = append(out, a)
		}
	}
	if len(out) > in.Limit {
		return out[:in.Limit], true, nil
	}
	return out, false, nil
}

func (f *fakeApprovals) Get(_ context.Context, id string) (*approval.Approval, error) {
	if f.err != nil {
		return nil, f.err
	}
	for i, a := range f.items {
		if a.ID == id {
			return &f.items[i], nil
		}
	}
	return nil, fmt.Errorf("%s: %w", id, approval.ErrNotFound)
}

func (f *fakeApprovals) Decide(ctx context.Context, id string, approve bool) (*approval.Approval, error) {
	a, err := f.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if a.State != "pending" {
		return nil, fmt.Errorf("%s: %w", id, approval.ErrDecided)
	}
	a.State = map[bool]string{true: "approved", false: "denied"}[approve]
	return a, nil
}

type fakeToolCalls struct {
	calls  []audit.Call // newest first
	listed store.ToolCallFilter
}

func (f *fakeToolCalls) List(_ context.Context, in store.ToolCallFilter) ([]audit.Call, bool, error) {
	f.listed = in
	var out []audit.Call
	for _, c := range f.calls {
		if (in.BeforeID == 0 || c.ID < in.BeforeID) && (in.PID == 0 || c.PID != nil && *c.PID == in.PID) {
			out = append(out, c)
		}
	}
	if len(out) > in.Limit {
		return out[:in.Limit], true, nil
	}
	return out, false, nil
}

// fakeSessions answers every call with err, or with a session s1.
type fakeSessions struct {
	err     error
	created session.CreateInput
	put     []byte
}

func (f *fakeSessions) Create(_ context.Context, in session.CreateInput) (*store.Session, error) {
	f.created = in
	if f.err != nil {
		return nil, f.err
	}
	return &store.Session{ID: "s1", State: "idle"}, nil
}

func (f *fakeSessions) List(context.Context, store.SessionFilter) ([]store.Session, error) {
	return nil, f.err
}

func (f *fakeSessions) Get(context.Context, string) (*store.Session, error) {
	if f.err != nil {
		return nil, f.err
	}
	return &store.Session{ID: "s1", State: "idle"}, nil
}

func (f *fakeSessions) End(context.Context, string) error { return f.err }

func (f *fakeSessions) ListFiles(context.Context, string) ([]session.File, error) { return nil, f.err }

func (f *fakeSessions) PutFile(_ context.Context, _, _ string, data []byte) error {
	f.put = data
	return f.err
}

func (f *fakeSessions) OpenFile(context.Context, string, string) (io.Reader, int64, error) {
	return strings.NewReader("a,b\n"), 4, f.err
}

func (f *fakeSessions) DeleteFile(context.Context, string, string) error { return f.err }

type fakeReadiness struct{ err error }

func (f *fakeReadiness) Ready(context.Context) error { return f.err }

// fixture is the API over a fresh set of fakes.
type fixture struct {
	procs     *fakeProcesses
	env       *fakeEnvironment
	mods      *fakeModules
	svcs      *fakeServices
	tools     *fakeTools
	gate      *fakeGate
	policies  *fakePolicies
	approvals *fakeApprovals
	calls     *fakeToolCalls
	sessions  *fakeSessions
	ready     *fakeReadiness
	logs      *strings.Builder
	api       humatest.TestAPI
}

func newFixture(t *testing.T) *fixture { t.Helper(); return newFixtureWith(t, nil) }

// newFixtureWith is the API over fakes, authenticating with k (nil: no
// authentication).
func newFixtureWith(t *testing.T, k *fakeKeys) *fixture {
	t.Helper()
	f := &fixture{
		procs: &fakeProcesses{}, env: &fakeEnvironment{}, mods: &fakeModules{},
		svcs: &fakeServices{}, tools: &fakeTools{}, gate: &fakeGate{}, policies: &fakePolicies{},
		approvals: &fakeApprovals{}, calls: &fakeToolCalls{}, sessions: &fakeSessions{}, ready: &fakeReadiness{}, logs: &strings.Builder{},
	}
	d := Deps{
		Log: slog.New(slog.NewTextHandler(f.logs, nil)), Version: "test", Changes: &fakeChanges{},
		MCP:       http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) }),
		Processes: f.procs, Environment: f.env, Modules: f.mods, Services: f.svcs, Tools: f.tools,
		Gate: f.gate, Policies: f.policies, Approvals: f.approvals, ToolCalls: f.calls, Sessions: f.sessions, Ready: f.ready,
	}
	if k != nil {
		d.Keys = k
	}
	_, a := New(d)
	f.api = humatest.Wrap(t, a)
	return f
}

// wantStatus fails unless rec has status, and decodes its JSON body into out
// (when not nil).
func wantStatus(t *testing.T, rec *httptest.ResponseRecorder, status int, out any) {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d: %s", rec.Code, status, rec.Body.String())
	}
	if out != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatalf("body %q: %v", rec.Body.String(), err)
		}
	}
}

// wantProblem fails unless rec is an RFC 9457 problem with status whose
// details sit at exactly locations, in order; it returns the problem.
func wantProblem(t *testing.T, rec *httptest.ResponseRecorder, status int, locations ...string) huma.ErrorModel {
	t.Helper()
	var p huma.ErrorModel
	wantStatus(t, rec, status, &p)
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	if p.Status != status {
		t.Errorf("problem status %d, want %d", p.Status, status)
	}
	var got []string
	for _, d := range p.Errors {
		got = append(got, d.Location)
	}
	if !slices.Equal(got, locations) {
		t.Errorf("problem locations %q, want %q (%s)", got, locations, rec.Body.String())
	}
	return p
}

// readAll is the text of a body.
func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// fakeKeys authenticates the keys it maps; it records what it is asked.
type fakeKeys struct {
	keys    map[string]caller.Caller
	created keys.CreateInput
	err     error
	authErr error // the database cannot be read
}

func (f *fakeKeys) Authenticate(_ context.Context, key string) (caller.Caller, error) {
	if f.authErr != nil {
		return caller.Caller{}, f.authErr
	}
	if c, ok := f.keys[key]; ok {
		return c, nil
	}
	return caller.Caller{}, keys.ErrUnknown
}

func (f *fakeKeys) Create(_ context.Context, in keys.CreateInput) (*keys.CreatedKey, error) {
	f.created = in
	if f.err != nil {
		return nil, f.err
	}
	return &keys.CreatedKey{Key: keys.Key{ID: "key_1", Name: in.Name, Roles: in.Roles}, Secret: "cyk_x"}, nil
}

func (f *fakeKeys) List(context.Context, keys.ListInput) ([]keys.Key, bool, error) {
	return []keys.Key{{ID: "bootstrap", Roles: []caller.Role{caller.Admin}}}, false, f.err
}

func (f *fakeKeys) Get(_ context.Context, id string) (*keys.Key, error) {
	if id != "bootstrap" {
		return nil, keys.ErrNotFound
	}
	return &keys.Key{ID: id, Roles: []caller.Role{caller.Admin}}, nil
}

func (f *fakeKeys) Revoke(_ context.Context, id string) error {
	switch id {
	case "bootstrap":
		return keys.ErrBootstrap
	case "key_1":
		return nil
	}
	return keys.ErrNotFound
}

// fakeChanges lists one change.
type fakeChanges struct{}

func (fakeChanges) List(context.Context, changes.ListInput) ([]changes.Change, bool, error) {
	return []changes.Change{{ID: 1, KeyID: "bootstrap", Action: "key.create", Target: "key_1", Detail: map[string]any{}}}, false, nil
}
