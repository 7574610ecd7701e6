package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sleeper runs until it is killed (the run_code timeout is longer).
const sleeper = "import time\nprint('started', flush=True)\ntime.sleep(30)"

// rawMCP speaks to /mcp without an SDK: one session, plain POSTs.
type rawMCP struct {
	t       *testing.T
	h       *host
	key     string
	session string
}

func (m *rawMCP) request(ctx context.Context, msg string) *http.Request {
	req, err := http.NewRequestWithContext(ctx, "POST", m.h.base+"/mcp", strings.NewReader(msg))
	if err != nil {
		m.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+m.key)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	if m.session != "" {
		req.Header.Set("Mcp-Session-Id", m.session)
	}
	return req
}

// post sends a message and returns the status, content type and body (the
// data of the first event when the answer is an event stream).
func (m *rawMCP) post(msg string) (int, string, string) {
	m.t.Helper()
	resp, err := http.DefaultClient.Do(m.request(context.Background(), msg))
	if err != nil {
		m.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		m.t.Fatal(err)
	}
	body := string(b)
	if ct := resp.Header.Get("Content-Type"); strings.HasPrefix(ct, "text/event-stream") {
		for line := range strings.Lines(body) {
			if d, ok := strings.CutPrefix(line, "data: "); ok && strings.TrimSpace(d) != "" {
				body = strings.TrimSpace(d)
				break
			}
		}
	}
	if id := resp.Header.Get("Mcp-Session-Id"); id != "" && m.session == "" {
		m.session = id
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), body
}

// rawSession opens a session as key.
func rawSession(t *testing.T, h *host, key string) *rawMCP {
	t.Helper()
	m := &rawMCP{t: t, h: h, key: key}
	if code, _, body := m.post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`); code != 200 {
		t.Fatalf("initialize: %d %s", code, body)
	}
	if code, _, body := m.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); code != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", code, body)
	}
	return m
}

func runCall(id int) string {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call",
		"params": map[string]any{"name": "run_code", "arguments": map[string]any{"code": sleeper, "timeoutMs": 120000}}})
	return string(b)
}

// runningMCPProcess waits for the one process run_code started to print
// that it runs, and returns its pid.
func runningMCPProcess(t *testing.T, h *host) int64 {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var list struct {
			Items []proc `json:"items"`
		}
		h.do("GET", "/processes?ref=mcp&state=running", nil, &list)
		if len(list.Items) == 1 {
			h.waitFor(list.Items[0].PID, func(p proc) bool { return strings.Contains(p.Stdout, "started") })
			return list.Items[0].PID
		}
		if len(list.Items) > 1 {
			t.Fatalf("%d MCP runs at once: %+v", len(list.Items), list.Items)
		}
		// The list is polled: no event announces a new process.
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("run_code started no process within 30 s")
	return 0
}

// killedWithinASecond: the process ended, cancelled, within a second of
// the moment the agent went away.
func killedWithinASecond(t *testing.T, h *host, pid int64, since time.Time) {
	t.Helper()
	var p proc
	h.do("GET", fmt.Sprintf("/processes/%d/wait?timeoutMs=5000", pid), nil, &p)
	took := time.Since(since)
	if p.State != "idle" || p.exit() != "canceled" || p.reason() != "killed" {
		t.Fatalf("process %d after the agent left: %s %s (%s), %v later", pid, p.State, p.exit(), p.reason(), took)
	}
	if took > time.Second {
		t.Fatalf("process %d was killed %v after the agent left, want within 1 s", pid, took)
	}
}

// TestMCPStoppingTheAgentStopsItsCode: run_code's program is killed within
// a second when the agent's SDK cancels the call, when the HTTP request is
// aborted, when the connection drops and when notifications/cancelled names
// the call; a cancellation naming another request kills nothing (control).
func TestMCPStoppingTheAgentStopsItsCode(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	agent := *h
	agent.key = h.newKey("agent", "runner").Key

	t.Run("the go-sdk client cancels the call", func(t *testing.T) {
		s := mcpSession(t, &agent)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": sleeper, "timeoutMs": 120000}})
			done <- err
		}()
		pid := runningMCPProcess(t, h)
		at := time.Now()
		cancel()
		killedWithinASecond(t, h, pid, at)
		if err := <-done; err == nil {
			t.Fatal("a cancelled call returned no error")
		}
	})

	t.Run("the HTTP request is aborted", func(t *testing.T) {
		m := rawSession(t, h, agent.key)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			if resp, err := http.DefaultClient.Do(m.request(ctx, runCall(2))); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		pid := runningMCPProcess(t, h)
		at := time.Now()
		cancel()
		killedWithinASecond(t, h, pid, at)
		<-done
	})

	t.Run("the connection drops", func(t *testing.T) {
		m := rawSession(t, h, agent.key)
		conn, err := net.Dial("tcp", strings.TrimPrefix(h.base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		if err := m.request(context.Background(), runCall(3)).Write(conn); err != nil {
			t.Fatal(err)
		}
		pid := runningMCPProcess(t, h)
		at := time.Now()
		conn.Close()
		killedWithinASecond(t, h, pid, at)
	})

	t.Run("notifications/cancelled names the call", func(t *testing.T) {
		m := rawSession(t, h, agent.key)
		done := make(chan string, 1)
		go func() {
			resp, err := http.DefaultClient.Do(m.request(context.Background(), runCall(4)))
			if err != nil {
				done <- err.Error()
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			done <- string(b)
		}()
		pid := runningMCPProcess(t, h)
		// Control: cancelling another request id stops nothing.
		if code, _, body := m.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":99,"reason":"not this one"}}`); code != http.StatusAccepted {
			t.Fatalf("cancel another id: %d %s", code, body)
		}
		var p proc
		if h.do("GET", fmt.Sprintf("/processes/%d/wait?timeoutMs=500", pid), nil, &p); p.State != "running" {
			t.Fatalf("cancelling request 99 stopped the run of request 4: %+v", p)
		}
		at := time.Now()
		if code, _, body := m.post(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":4,"reason":"the user stopped"}}`); code != http.StatusAccepted {
			t.Fatalf("cancel: %d %s", code, body)
		}
		killedWithinASecond(t, h, pid, at)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the cancelled call's HTTP request is still open 10 s later")
		}
	})
}

// TestMCPApprovalReachesTheAgent: run_code whose program calls a tool under
// ask returns the pid and state suspended (not an error, no exitState);
// wait_process before the decision says suspended; an approver approves
// over REST, and wait_process gives the agent the program's result.
func TestMCPApprovalReachesTheAgent(t *testing.T) {
	t.Parallel()
	h, up := governed(t, "")
	setPolicies(t, h, "allow", [2]string{"petstore.getPetById", "ask"})
	agent := *h
	agent.key = h.newKey("agent", "runner").Key
	s := mcpSession(t, &agent)

	r := call(t, s, "run_code", map[string]any{"code": "r = cyrnel.services.petstore.getPetById(petId=5)\nprint('status', r['status'])\ncyrnel.output({'status': r['status']})"})
	out := structured[struct {
		PID       int64  `json:"pid"`
		State     string `json:"state"`
		ExitState string `json:"exitState"`
		Pending   []struct {
			ID     string `json:"id"`
			ToolID string `json:"toolId"`
		} `json:"pendingApprovals"`
	}](t, r)
	if r.IsError || out.PID == 0 || out.State != "suspended" || out.ExitState != "" || len(out.Pending) != 1 || out.Pending[0].ToolID != "getPetById" {
		t.Fatalf("run_code under ask: isError %v %+v %q", r.IsError, out, textOf(r))
	}
	if !strings.Contains(textOf(r), fmt.Sprintf("wait_process with pid %d", out.PID)) {
		t.Fatalf("run_code does not say how to get the result: %q", textOf(r))
	}
	pid := out.PID

	// Before the decision, wait_process times out saying suspended.
	r = call(t, s, "wait_process", map[string]any{"pid": pid, "timeoutMs": 300})
	if w := structured[runResult](t, r); r.IsError || w.PID != pid || w.ExitState != "" || !strings.Contains(textOf(r), "is suspended") {
		t.Fatalf("wait_process before the decision: isError %v %+v %q", r.IsError, w, textOf(r))
	}
	if up.count() != 0 {
		t.Fatalf("the tool ran before its approval: %v", up.paths())
	}

	approver := *h
	approver.key = h.newKey("reviewer", "approver").Key
	var decided approvalView
	if st, _ := approver.do("POST", "/approvals/"+out.Pending[0].ID+"/approve", nil, &decided); st != 200 || decided.State != "approved" {
		t.Fatalf("approve: %d %+v", st, decided)
	}
	r = call(t, s, "wait_process", map[string]any{"pid": pid, "timeoutMs": 60000})
	if w := structured[runResult](t, r); r.IsError || w.PID != pid || w.ExitState != "success" || w.Output["status"] != 200.0 || w.Stdout != "status 200\n" {
		t.Fatalf("wait_process after the approval: isError %v %+v %q", r.IsError, w, textOf(r))
	}
	if r = call(t, s, "wait_process", map[string]any{"pid": 999999}); !r.IsError {
		t.Fatalf("wait_process on no such process: %q", textOf(r))
	}
}

// TestMCPProtocolErrors: a body that is not JSON is -32700 and a method the
// endpoint does not serve -32601, both as JSON-RPC (application/json);
// capabilities that are not advertised do not answer; tools/list on the
// same session answers (control).
func TestMCPProtocolErrors(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	m := rawSession(t, h, h.newKey("agent", "runner").Key)
	type rpc struct {
		ID    any `json:"id"`
		Error *struct {
			Code int `json:"code"`
		} `json:"error"`
		Result map[string]any `json:"result"`
	}
	decode := func(what, body string) rpc {
		var v rpc
		if err := json.Unmarshal([]byte(body), &v); err != nil {
			t.Fatalf("%s: not JSON-RPC: %q", what, body)
		}
		return v
	}
	code, ct, body := m.post(`{"jsonrpc":"2.0","id":5,"method":"tools/list"`)
	if v := decode("malformed", body); code != 400 || ct != "application/json" || v.Error == nil || v.Error.Code != -32700 || !strings.Contains(body, `"id":null`) {
		t.Fatalf("malformed body: %d %s %s", code, ct, body)
	}
	code, ct, body = m.post(`{"jsonrpc":"1.0","id":6,"method":"tools/list"}`)
	if v := decode("not a message", body); code != 400 || ct != "application/json" || v.Error == nil || v.Error.Code != -32600 {
		t.Fatalf("JSON that is no JSON-RPC message: %d %s %s", code, ct, body)
	}
	for i, method := range []string{"no/such", "logging/setLevel", "resources/list", "resources/templates/list", "prompts/list", "completion/complete"} {
		code, ct, body := m.post(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"level":"debug"}}`, 10+i, method))
		if v := decode(method, body); code != 200 || ct != "application/json" || v.Error == nil || v.Error.Code != -32601 || v.ID != float64(10+i) {
			t.Errorf("%s: %d %s %s", method, code, ct, body)
		}
	}
	code, _, body = m.post(`{"jsonrpc":"2.0","id":30,"method":"tools/list"}`)
	if v := decode("tools/list", body); code != 200 || v.Error != nil || v.Result["tools"] == nil {
		t.Fatalf("tools/list: %d %s", code, body)
	}
	// initialize advertises tools only.
	fresh := &rawMCP{t: t, h: h, key: m.key}
	_, _, body = fresh.post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`)
	caps, _ := decode("initialize", body).Result["capabilities"].(map[string]any)
	if _, ok := caps["tools"]; !ok || len(caps) != 1 {
		t.Fatalf("capabilities %v, want tools only", caps)
	}
	if !bytes.Contains([]byte(body), []byte(`"protocolVersion":"2025-06-18"`)) || fresh.session == "" {
		t.Fatalf("initialize: %s (session %q)", body, fresh.session)
	}
}
