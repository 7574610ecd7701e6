package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cyrnel/cyrnel/host/process"
)

// key is an API key the ownership tests use: its id and its secret.
type key struct{ id, secret string }

// testKeys are the keys of keyedHost: runners A and B, an approver, and the
// bootstrap admin key.
type testKeys struct{ a, b, approver, admin key }

// keyedHost is a host on loopback with keys made through POST /keys; A
// also holds approver when aApproves (an agent's key that may decide).
func keyedHost(t *testing.T, aApproves bool) (*Server, string, testKeys) {
	t.Helper()
	s, err := New(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), Config{
		Addr: "127.0.0.1:0", DataDir: t.TempDir(), Limits: process.DefaultLimits(), APIKey: "test-key",
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() { srv.Close(); s.Close() })
	k := testKeys{admin: key{"bootstrap", "test-key"}}
	rolesA := []string{"runner"}
	if aApproves {
		rolesA = append(rolesA, "approver")
	}
	for _, c := range []struct {
		to    *key
		roles []string
	}{{&k.a, rolesA}, {&k.b, []string{"runner"}}, {&k.approver, []string{"approver"}}} {
		var made struct {
			ID  string `json:"id"`
			Key string `json:"key"`
		}
		if code := asJSON(t, srv.URL, k.admin, "POST", "/keys", map[string]any{"name": strings.Join(c.roles, "+"), "roles": c.roles}, &made); code != 201 {
			t.Fatalf("create a key: %d", code)
		}
		*c.to = key{made.ID, made.Key}
	}
	return s, srv.URL, k
}

// as sends a request as key: body is JSON unless it is []byte (a file).
func as(t *testing.T, url string, k key, method, path string, body any) (int, []byte) {
	t.Helper()
	var r io.Reader
	ct := "application/json"
	switch b := body.(type) {
	case nil:
	case []byte:
		r, ct = bytes.NewReader(b), "application/octet-stream"
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", ct)
	}
	req.Header.Set("Authorization", "Bearer "+k.secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}

// asJSON is as, decoding a 2xx answer into out.
func asJSON(t *testing.T, url string, k key, method, path string, body, out any) int {
	t.Helper()
	code, b := as(t, url, k, method, path, body)
	if code/100 == 2 && out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return code
}

type owned struct {
	PID     int64  `json:"pid"`
	ID      string `json:"id"`
	Owner   string `json:"owner"`
	Session string `json:"session"`
}

type ownedList struct {
	Items []owned `json:"items"`
}

// routesOf are the routes that name a process or a session, each with
// the body it sends.
func routesOf(pid int64, session string) []struct {
	method, path string
	body         any
} {
	p, s := fmt.Sprintf("/processes/%d", pid), "/sessions/"+session
	return []struct {
		method, path string
		body         any
	}{
		{"GET", p, nil}, {"GET", p + "/wait?timeoutMs=0", nil}, {"GET", p + "/output", nil}, {"GET", p + "/stdout", nil},
		{"GET", p + "/stderr", nil}, {"GET", p + "/code", nil}, {"GET", p + "/files", nil}, {"GET", p + "/files/out.txt", nil},
		{"GET", p + "/displays", nil}, {"GET", p + "/events", nil}, {"GET", p + "/tool-calls", nil},
		{"POST", p + "/kill", nil}, {"POST", p + "/run", map[string]any{"force": true}}, {"DELETE", p, nil},
		{"GET", s, nil}, {"GET", s + "/files", nil}, {"GET", s + "/files/in.txt", nil},
		{"PUT", s + "/files/in.txt", []byte("overwritten")}, {"DELETE", s + "/files/in.txt", nil}, {"DELETE", s, nil},
	}
}

// TestRunnerKeysSeeOnlyTheirOwn, with real Python: runner B finds runner
// A's process and session, their files and output, on no route, answered
// exactly as for ones that do not exist, and cannot run code in A's
// session over REST or MCP; A's own, everyone's processes for an approver
// and everything for the admin stay in reach (the control). The admin sees
// A's session but may not run code in it (403).
func TestRunnerKeysSeeOnlyTheirOwn(t *testing.T) {
	t.Parallel()
	s, url, k := keyedHost(t, false)
	var pa, pb owned
	if code := asJSON(t, url, k.a, "POST", "/processes", map[string]any{"code": "open('out.txt', 'w').write('secret of a')\nprint('a')", "waitMs": 60000}, &pa); code != 201 || pa.Owner != k.a.id {
		t.Fatalf("A's process: %d %+v", code, pa)
	}
	if code := asJSON(t, url, k.b, "POST", "/processes", map[string]any{"code": "print('b')", "waitMs": 60000}, &pb); code != 201 || pb.Owner != k.b.id {
		t.Fatalf("B's process: %d %+v", code, pb)
	}
	var sa, sb owned
	if code := asJSON(t, url, k.a, "POST", "/sessions", map[string]any{}, &sa); code != 201 || sa.Owner != k.a.id {
		t.Fatalf("A's session: %d %+v", code, sa)
	}
	if code := asJSON(t, url, k.b, "POST", "/sessions", map[string]any{}, &sb); code != 201 || sb.Owner != k.b.id {
		t.Fatalf("B's session: %d %+v", code, sb)
	}
	if code, _ := as(t, url, k.a, "PUT", "/sessions/"+sa.ID+"/files/in.txt", []byte("secret of a")); code != 204 {
		t.Fatalf("A's upload: %d", code)
	}

	// B, on every route, is answered as for a process and a session that
	// do not exist: same status, same problem, the id aside.
	missing := routesOf(999999, "ses_MISSING")
	for i, r := range routesOf(pa.PID, sa.ID) {
		code, body := as(t, url, k.b, r.method, r.path, r.body)
		wantCode, wantBody := as(t, url, k.b, missing[i].method, missing[i].path, missing[i].body)
		got := strings.NewReplacer(fmt.Sprint(pa.PID), "ID", sa.ID, "ID").Replace(string(body))
		want := strings.NewReplacer("999999", "ID", "ses_MISSING", "ID").Replace(string(wantBody))
		if code != 404 || code != wantCode || got != want {
			t.Errorf("B: %s %s: %d %s, want %d %s as for a missing one", r.method, r.path, code, body, wantCode, wantBody)
		}
	}
	code, body := as(t, url, k.b, "POST", "/processes", map[string]any{"code": "print(1)", "session": sa.ID})
	wantCode, wantBody := as(t, url, k.b, "POST", "/processes", map[string]any{"code": "print(1)", "session": "ses_MISSING"})
	if code != 422 || code != wantCode || strings.ReplaceAll(string(body), sa.ID, "ID") != strings.ReplaceAll(string(wantBody), "ses_MISSING", "ID") {
		t.Errorf("B runs code in A's session: %d %s, want %d %s as for a missing one", code, body, wantCode, wantBody)
	}
	for path, want := range map[string]string{"/processes": fmt.Sprint(pb.PID), "/sessions": sb.ID} {
		var l ownedList
		if code := asJSON(t, url, k.b, "GET", path, nil, &l); code != 200 || len(l.Items) != 1 || (fmt.Sprint(l.Items[0].PID) != want && l.Items[0].ID != want) {
			t.Errorf("B lists %s: %d %+v, want only %s", path, code, l, want)
		}
	}
	wantMCPRefused(t, url, k.b, sa.ID)

	// The control: A reaches its own on the same routes; the keys that see
	// everything list both; A runs code in its session, over MCP too.
	for _, r := range routesOf(pa.PID, sa.ID)[:11] {
		if code, body := as(t, url, k.a, r.method, r.path, r.body); code != 200 {
			t.Errorf("A: %s %s: %d %s", r.method, r.path, code, body)
		}
	}
	if code, body := as(t, url, k.a, "GET", "/sessions/"+sa.ID+"/files/in.txt", nil); code != 200 || string(body) != "secret of a" {
		t.Errorf("A's own file: %d %s", code, body)
	}
	var run owned
	if code := asJSON(t, url, k.a, "POST", "/processes", map[string]any{"code": "print(1)", "session": sa.ID, "waitMs": 60000}, &run); code != 201 || run.Session != sa.ID || run.Owner != k.a.id {
		t.Errorf("A runs code in its session: %d %+v", code, run)
	}
	if res, text := mcpRun(t, url, k.a, sa.ID); res.IsError {
		t.Errorf("A's run_code in its session: %s", text)
	}
	// Sessions are runners' (and the admin's) routes; an approver reads
	// processes.
	for _, c := range []struct {
		name     string
		k        key
		sessions bool
	}{{"the approver", k.approver, false}, {"the admin", k.admin, true}} {
		var ps ownedList
		owners := map[string]bool{}
		if asJSON(t, url, c.k, "GET", "/processes", nil, &ps) != 200 {
			t.Fatalf("%s lists processes", c.name)
		}
		for _, p := range ps.Items {
			owners[p.Owner] = true
		}
		if !owners[k.a.id] || !owners[k.b.id] {
			t.Errorf("%s lists %+v, want both runners' processes", c.name, ps)
		}
		if code, body := as(t, url, c.k, "GET", fmt.Sprintf("/processes/%d/files/out.txt", pa.PID), nil); code != 200 || string(body) != "secret of a" {
			t.Errorf("%s reads A's file: %d %s", c.name, code, body)
		}
		if !c.sessions {
			continue
		}
		var ss ownedList
		if asJSON(t, url, c.k, "GET", "/sessions", nil, &ss) != 200 || len(ss.Items) != 2 {
			t.Errorf("%s lists %+v, want both runners' sessions", c.name, ss)
		}
		if code, body := as(t, url, c.k, "GET", "/sessions/"+sa.ID+"/files/in.txt", nil); code != 200 || string(body) != "secret of a" {
			t.Errorf("%s reads A's session file: %d %s", c.name, code, body)
		}
	}
	code, body = as(t, url, k.admin, "POST", "/processes", map[string]any{"code": "print(1)", "session": sa.ID})
	if code != 403 || !strings.Contains(string(body), "body.session") {
		t.Errorf("an admin runs code in A's session: %d %s, want 403 at body.session", code, body)
	}
	if _, err := s.sessions.Get(context.Background(), sa.ID); err != nil {
		t.Fatalf("A's session after B's attempts: %v", err)
	}
}

// mcpRun calls run_code in session as key over MCP.
func mcpRun(t *testing.T, url string, k key, session string) (*mcp.CallToolResult, string) {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	hc := &http.Client{Transport: keyTransport{k}}
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": "print(2)", "session": session}})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return res, b.String()
}

// wantMCPRefused: run_code in another key's session is refused over MCP
// as for a session that does not exist.
func wantMCPRefused(t *testing.T, url string, k key, session string) {
	t.Helper()
	res, text := mcpRun(t, url, k, session)
	_, missing := mcpRun(t, url, k, "ses_MISSING")
	if !res.IsError || strings.ReplaceAll(text, session, "ID") != strings.ReplaceAll(missing, "ses_MISSING", "ID") {
		t.Errorf("MCP run_code in another key's session: %v %q, want %q as for a missing one", res.IsError, text, missing)
	}
}

// keyTransport sends each request with the key.
type keyTransport struct{ k key }

func (t keyTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+t.k.secret)
	return http.DefaultTransport.RoundTrip(r)
}

// awaitApproval follows the process's events as key until a tool call of
// it waits on an approval, and returns that approval.
func awaitApproval[A any](t *testing.T, url string, k key, pid int64) A {
	t.Helper()
	req, err := http.NewRequest("GET", fmt.Sprintf("%s/processes/%d/events", url, pid), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+k.secret)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for event := ""; sc.Scan(); {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "event: "); ok {
			event = name
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok && event == "approval" {
			var a A
			if err := json.Unmarshal([]byte(data), &a); err != nil {
				t.Fatal(err)
			}
			return a
		}
	}
	t.Fatalf("the events of process %d ended without an approval (%d)", pid, resp.StatusCode)
	var none A
	return none
}

// TestApprovalsAndToolCallsRecordTheirKeys, with real Python and a loopback
// upstream: a program of A (a key that runs code and may also decide
// approvals) waits on an approval that carries A's key; A cannot decide it
// (403, and it stays pending), an approver can,
// and is recorded as decidedBy; the program's call is A's in the audit,
// and a call through POST /tools/…/invoke is the caller's.
func TestApprovalsAndToolCallsRecordTheirKeys(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id": 1, "name": "rex"}`)
	}))
	t.Cleanup(up.Close)
	_, url, k := keyedHost(t, true)
	doc, err := os.ReadFile("testdata/petstore-3.0.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if code, body := as(t, url, k.admin, "POST", "/services", map[string]any{"id": "pets", "adapter": "openapi", "source": map[string]any{"content": string(doc)},
		"config": map[string]any{"serverUrl": up.URL, "allowPrivateNetwork": true}}); code != 201 {
		t.Fatalf("import: %d %s", code, body)
	}
	if code, body := as(t, url, k.admin, "PUT", "/tool-policies", map[string]any{"default": "allow", "rules": []any{map[string]any{"pattern": "pets.showPetById", "decision": "ask"}}}); code != 200 {
		t.Fatalf("policies: %d %s", code, body)
	}
	var p owned
	if code := asJSON(t, url, k.a, "POST", "/processes", map[string]any{"code": "cyrnel.output({'pet': cyrnel.services.pets.showPetById(petId='1')})", "timeoutMs": 60000}, &p); code != 201 {
		t.Fatalf("A's process: %d", code)
	}
	type approval struct {
		ID        string `json:"id"`
		State     string `json:"state"`
		KeyID     string `json:"keyId"`
		DecidedBy string `json:"decidedBy"`
	}
	a := awaitApproval[approval](t, url, k.a, p.PID)
	if a.KeyID != k.a.id {
		t.Fatalf("the approval names key %q, want A's", a.KeyID)
	}
	code, body := as(t, url, k.a, "POST", "/approvals/"+a.ID+"/approve", nil)
	if code != 403 {
		t.Fatalf("A approves its own call: %d %s, want 403", code, body)
	}
	var still approval
	if asJSON(t, url, k.approver, "GET", "/approvals/"+a.ID, nil, &still); still.State != "pending" || still.DecidedBy != "" {
		t.Fatalf("after A's attempt: %+v", still)
	}
	var decided approval
	if code := asJSON(t, url, k.approver, "POST", "/approvals/"+a.ID+"/approve", nil, &decided); code != 200 || decided.State != "approved" || decided.DecidedBy != k.approver.id {
		t.Fatalf("the approver's decision: %d %+v", code, decided)
	}
	var done struct {
		ExitState string         `json:"exitState"`
		Output    map[string]any `json:"output"`
		Stderr    string         `json:"stderr"`
	}
	if asJSON(t, url, k.a, "GET", fmt.Sprintf("/processes/%d/wait?timeoutMs=60000", p.PID), nil, &done); done.ExitState != "success" || done.Output["pet"] == nil {
		t.Fatalf("A's process after the approval: %+v", done)
	}

	if code, body := as(t, url, k.b, "POST", "/tools/pets/listPets/invoke", map[string]any{"parameters": map[string]any{}}); code != 200 {
		t.Fatalf("B's invoke: %d %s", code, body)
	}
	var calls struct {
		Items []struct {
			ToolID     string  `json:"toolId"`
			PID        *int64  `json:"pid"`
			KeyID      string  `json:"keyId"`
			ApprovalID *string `json:"approvalId"`
		}
	}
	if code := asJSON(t, url, k.approver, "GET", "/tool-calls", nil, &calls); code != 200 || len(calls.Items) != 2 {
		t.Fatalf("the audit: %d %+v", code, calls)
	}
	invoke, program := calls.Items[0], calls.Items[1]
	if invoke.ToolID != "listPets" || invoke.KeyID != k.b.id || invoke.PID != nil {
		t.Errorf("B's invoke audited as %+v, want key_b", invoke)
	}
	if program.ToolID != "showPetById" || program.KeyID != k.a.id || program.PID == nil || *program.PID != p.PID || program.ApprovalID == nil || *program.ApprovalID != a.ID {
		t.Errorf("A's program's call audited as %+v, want key_a", program)
	}
}
