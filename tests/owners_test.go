package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// withKey is the host seen through another API key.
func (h *host) withKey(key string) *host {
	c := *h
	c.key = key
	return &c
}

type ownedView struct {
	PID   int64  `json:"pid"`
	ID    string `json:"id"`
	Owner string `json:"owner"`
}

// hiddenRoutes are the routes that name a process or a session, each with
// the raw body it sends (nil: none).
func hiddenRoutes(pid int64, session string) [][3]string {
	p, s := fmt.Sprintf("/processes/%d", pid), "/sessions/"+session
	return [][3]string{
		{"GET", p, ""}, {"GET", p + "/wait?timeoutMs=0", ""}, {"GET", p + "/output", ""}, {"GET", p + "/stdout", ""},
		{"GET", p + "/stderr", ""}, {"GET", p + "/code", ""}, {"GET", p + "/files", ""}, {"GET", p + "/files/out.txt", ""},
		{"GET", p + "/displays", ""}, {"GET", p + "/events", ""}, {"GET", p + "/tool-calls", ""},
		{"POST", p + "/kill", ""}, {"POST", p + "/run", `{"force": true}`}, {"DELETE", p, ""},
		{"GET", s, ""}, {"GET", s + "/files", ""}, {"GET", s + "/files/in.txt", ""},
		{"PUT", s + "/files/in.txt", "overwritten"}, {"DELETE", s + "/files/in.txt", ""}, {"DELETE", s, ""},
	}
}

func send(h *host, r [3]string) (int, string) {
	h.t.Helper()
	ct := ""
	switch {
	case strings.HasPrefix(r[2], "{"):
		ct = "application/json"
	case r[2] != "":
		ct = "application/octet-stream"
	}
	st, _, body := h.raw(r[0], r[1], ct, []byte(r[2]))
	return st, string(body)
}

// TestRunnerKeysCannotReachEachOther (issue 22, item 2), against the
// binary with two runner keys made through POST /keys: runner B finds
// runner A's process and session, their code, output and files, on no
// route, answered exactly as for ones that do not exist, and cannot run
// code in A's session. The control: the same routes answer A, an approver
// sees both runners' processes, and the bootstrap admin their processes and
// sessions.
func TestRunnerKeysCannotReachEachOther(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	ka, kb := h.newKey("agent-a", "runner"), h.newKey("agent-b", "runner")
	idA, idB := ka.ID, kb.ID
	a, b, reviewer := h.withKey(ka.Key), h.withKey(kb.Key), h.withKey(h.newKey("reviewer", "approver").Key)

	pa := a.run("open('out.txt', 'w').write('secret of a')\nprint('a')", nil)
	pb := b.run("print('b')", nil)
	sa, sb := a.newSession(map[string]any{}), b.newSession(map[string]any{})
	if st, _, _ := a.raw("PUT", "/sessions/"+sa.ID+"/files/in.txt", "application/octet-stream", []byte("secret of a")); st != http.StatusNoContent {
		t.Fatalf("A's upload: %d", st)
	}
	var owned ownedView
	if a.do("GET", fmt.Sprintf("/processes/%d", pa.PID), nil, &owned); owned.Owner != idA {
		t.Errorf("A's process is owned by %q, want %q", owned.Owner, idA)
	}

	missing := hiddenRoutes(999999, "ses_MISSING")
	for i, r := range hiddenRoutes(pa.PID, sa.ID) {
		st, body := send(b, r)
		wantSt, wantBody := send(b, missing[i])
		got := strings.NewReplacer(fmt.Sprint(pa.PID), "ID", sa.ID, "ID").Replace(body)
		want := strings.NewReplacer("999999", "ID", "ses_MISSING", "ID").Replace(wantBody)
		if st != http.StatusNotFound || st != wantSt || got != want || strings.Contains(body, "secret of a") {
			t.Errorf("B: %s %s: %d %s, want %d %s as for a missing one", r[0], r[1], st, body, wantSt, wantBody)
		}
	}
	var prob, missingProb string
	st, _ := b.do("POST", "/processes", map[string]any{"code": "print(1)", "session": sa.ID}, &prob)
	wantSt, _ := b.do("POST", "/processes", map[string]any{"code": "print(1)", "session": "ses_MISSING"}, &missingProb)
	if st != http.StatusUnprocessableEntity || st != wantSt || strings.ReplaceAll(prob, sa.ID, "ID") != strings.ReplaceAll(missingProb, "ses_MISSING", "ID") {
		t.Errorf("B runs code in A's session: %d %s, want %d %s", st, prob, wantSt, missingProb)
	}
	var ps, ss struct{ Items []ownedView }
	b.do("GET", "/processes", nil, &ps)
	b.do("GET", "/sessions", nil, &ss)
	if len(ps.Items) != 1 || ps.Items[0].PID != pb.PID || ps.Items[0].Owner != idB || len(ss.Items) != 1 || ss.Items[0].ID != sb.ID {
		t.Errorf("B lists %+v and %+v, want only its own", ps, ss)
	}

	// The control: the owner reaches its own on the same routes, and the
	// approver and the admin see both runners'.
	for _, r := range hiddenRoutes(pa.PID, sa.ID)[:11] {
		if st, body := send(a, r); st != http.StatusOK {
			t.Errorf("A: %s %s: %d %s", r[0], r[1], st, body)
		}
	}
	if st, _, body := a.raw("GET", "/sessions/"+sa.ID+"/files/in.txt", "", nil); st != http.StatusOK || string(body) != "secret of a" {
		t.Errorf("A's own file: %d %s", st, body)
	}
	if p := a.run("print(1)", map[string]any{"session": sa.ID}); p.exit() != "success" {
		t.Errorf("A runs code in its session: %+v", p)
	}
	// Sessions are runners' (and the admin's) routes; an approver reads
	// processes.
	for name, k := range map[string]*host{"the approver": reviewer, "the admin": h} {
		var ps struct{ Items []ownedView }
		k.do("GET", "/processes", nil, &ps)
		owners := map[string]bool{}
		for _, p := range ps.Items {
			owners[p.Owner] = true
		}
		if !owners[idA] || !owners[idB] {
			t.Errorf("%s lists %+v, want both runners' processes", name, ps)
		}
		if st, _, body := k.raw("GET", fmt.Sprintf("/processes/%d/files/out.txt", pa.PID), "", nil); st != http.StatusOK || string(body) != "secret of a" {
			t.Errorf("%s reads A's file: %d %s", name, st, body)
		}
	}
	var all struct{ Items []ownedView }
	if h.do("GET", "/sessions", nil, &all); len(all.Items) != 2 {
		t.Errorf("the admin lists sessions %+v, want both runners'", all)
	}
	if st, _, body := h.raw("GET", "/sessions/"+sa.ID+"/files/in.txt", "", nil); st != http.StatusOK || string(body) != "secret of a" {
		t.Errorf("the admin reads A's session file: %d %s", st, body)
	}
	// Only the owner runs code in a session, whoever sees it.
	if st, _ := h.do("POST", "/processes", map[string]any{"code": "print(1)", "session": sa.ID}, &prob); st != http.StatusForbidden || !strings.Contains(prob, "body.session") {
		t.Errorf("the admin runs code in A's session: %d %s, want 403 at body.session", st, prob)
	}
}

// TestNoKeyApprovesItsOwnCall (issue 22, item 2), against the binary: the
// bootstrap key, which may decide approvals, cannot approve a call of its
// own program (403, and the approval stays pending); an approver key made
// through POST /keys can, and is recorded as decidedBy. The audit names the
// key behind each call: the program's owner, and the caller of
// POST /tools/…/invoke.
func TestNoKeyApprovesItsOwnCall(t *testing.T) {
	t.Parallel()
	h, _ := governed(t, "")
	setPolicies(t, h, "allow", [2]string{"petstore.getPetById", "ask"})
	reviewer, agent := h.newKey("reviewer", "approver"), h.newKey("agent", "runner")
	pid, a := approvalOf(t, h, "r = cyrnel.services.petstore.getPetById(petId=5)\nprint('result', r['status'])", 0)
	if a.KeyID != "bootstrap" {
		t.Errorf("the approval names key %q, want the program's owner, bootstrap", a.KeyID)
	}
	var prob string
	if st, _ := h.do("POST", "/approvals/"+a.ID+"/approve", nil, &prob); st != http.StatusForbidden {
		t.Fatalf("the asking key approves its own call: %d %s, want 403", st, prob)
	}
	var still approvalView
	if h.do("GET", "/approvals/"+a.ID, nil, &still); still.State != "pending" || still.DecidedBy != "" {
		t.Fatalf("after the refused decision: %+v", still)
	}
	var got approvalView
	if st, _ := h.withKey(reviewer.Key).do("POST", "/approvals/"+a.ID+"/approve", nil, &got); st != http.StatusOK || got.State != "approved" || got.DecidedBy != reviewer.ID {
		t.Fatalf("another key's decision: %d %+v, want approved by %s", st, got, reviewer.ID)
	}
	if p := h.wait(pid); p.exit() != "success" || !strings.Contains(p.Stdout, "result 200") {
		t.Fatalf("the approved program: %+v", p)
	}
	if st, _ := h.withKey(agent.Key).do("POST", "/tools/petstore/findPetsByStatus/invoke", map[string]any{"parameters": map[string]any{"status": "available"}}, nil); st != http.StatusOK {
		t.Fatalf("the runner's invoke: %d", st)
	}
	var calls toolCallList
	h.do("GET", "/tool-calls", nil, &calls)
	if len(calls.Items) != 2 || calls.Items[0].KeyID != agent.ID || calls.Items[1].KeyID != "bootstrap" || calls.Items[1].PID == nil || *calls.Items[1].PID != pid {
		t.Fatalf("the audit: %+v, want the runner's invoke and the program's call as bootstrap's", calls)
	}
}

// TestRunnerKeysCannotReachEachOtherOverMCP (issue 22, item 2, over MCP):
// runner B's MCP tools find runner A's process and session nowhere:
// wait_process and kill_process on A's pid, run_code and end_session in A's
// session each fail exactly as for ones that do not exist, and tell nothing
// of A's output. The control: A's own MCP session reads the process and runs
// code in the session after B's attempts, and ends it.
func TestRunnerKeysCannotReachEachOtherOverMCP(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	ka, kb := h.newKey("agent-a", "runner"), h.newKey("agent-b", "runner")
	a, b := h.withKey(ka.Key), h.withKey(kb.Key)
	pa := a.run("print('secret of a')", nil)
	sa := a.newSession(map[string]any{})
	mb, ma := mcpSession(t, b), mcpSession(t, a)
	hide := strings.NewReplacer(fmt.Sprint(pa.PID), "ID", "999999", "ID", sa.ID, "ID", "ses_MISSING", "ID")
	for _, c := range []struct {
		tool           string
		theirs, absent map[string]any
	}{
		{"wait_process", map[string]any{"pid": pa.PID, "timeoutMs": 100}, map[string]any{"pid": 999999, "timeoutMs": 100}},
		{"kill_process", map[string]any{"pid": pa.PID}, map[string]any{"pid": 999999}},
		{"run_code", map[string]any{"code": "print(1)", "session": sa.ID}, map[string]any{"code": "print(1)", "session": "ses_MISSING"}},
		{"end_session", map[string]any{"session": sa.ID}, map[string]any{"session": "ses_MISSING"}},
	} {
		got, want := call(t, mb, c.tool, c.theirs), call(t, mb, c.tool, c.absent)
		if !got.IsError || !want.IsError || hide.Replace(textOf(got)) != hide.Replace(textOf(want)) || strings.Contains(textOf(got), "secret of a") {
			t.Errorf("B: %s on A's: error %v %q; on a missing one: error %v %q", c.tool, got.IsError, textOf(got), want.IsError, textOf(want))
		}
	}
	// The control: A reaches both, and B's attempts changed nothing.
	if r := call(t, ma, "wait_process", map[string]any{"pid": pa.PID, "timeoutMs": 100}); r.IsError || !strings.Contains(textOf(r), "secret of a") {
		t.Errorf("A: wait_process on its own process: error %v %q", r.IsError, textOf(r))
	}
	if r := call(t, ma, "run_code", map[string]any{"code": "print('still here')", "session": sa.ID}); r.IsError || !strings.Contains(textOf(r), "still here") {
		t.Errorf("A: run_code in its own session: error %v %q", r.IsError, textOf(r))
	}
	if r := call(t, ma, "end_session", map[string]any{"session": sa.ID}); r.IsError {
		t.Errorf("A: end_session of its own session: %q", textOf(r))
	}
}
