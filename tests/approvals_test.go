package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// approvalOf runs code whose calls need approval and returns the pid and
// the first approval (suspendedOn).
func approvalOf(t *testing.T, h *host, code string, timeoutMs int) (int64, approvalView) {
	t.Helper()
	var p proc
	body := map[string]any{"code": code}
	if timeoutMs > 0 {
		body["timeoutMs"] = timeoutMs
	}
	h.do("POST", "/processes", body, &p)
	return p.PID, suspendedOn(t, h, p.PID)
}

// suspendedOn returns the first approval process pid asks for, read from
// its event stream (live, or in its replay), once the process is suspended.
func suspendedOn(t *testing.T, h *host, pid int64) approvalView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/processes/%d/events", h.base, pid), nil)
	if h.key != "" {
		req.Header.Set("Authorization", "Bearer "+h.key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	event := ""
	var a approvalView
	suspended := false
	for sc.Scan() {
		line := sc.Text()
		if e, ok := strings.CutPrefix(line, "event:"); ok {
			event = strings.TrimSpace(e)
			continue
		}
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		switch event {
		case "approval":
			noSecrets(t, "an approval event", data)
			if a.ID == "" {
				if err := json.Unmarshal([]byte(data), &a); err != nil {
					t.Fatal(err)
				}
			}
		case "state":
			suspended = suspended || strings.Contains(data, `"suspended"`)
		case "exit":
			t.Fatalf("process %d ended before asking for an approval: %s", pid, data)
		}
		if a.ID != "" && suspended {
			return a
		}
	}
	t.Fatalf("process %d: no approval (%v)", pid, sc.Err())
	return a
}

// reviewer is the host seen through a new approver key: the programs of
// these tests run as the bootstrap key, which never decides its own calls.
func reviewer(h *host) *host {
	h.t.Helper()
	return h.withKey(h.newKey("reviewer", "approver").Key)
}

func (h *host) wait(pid int64) proc {
	h.t.Helper()
	var p proc
	h.do("GET", fmt.Sprintf("/processes/%d/wait?timeoutMs=60000", pid), nil, &p)
	if p.State != "idle" {
		h.t.Fatalf("process %d still %s", pid, p.State)
	}
	return p
}

func TestApprovals(t *testing.T) {
	t.Parallel()
	h, up := governed(t, "")
	setPolicies(t, h, "allow", [2]string{"petstore.getPetById", "ask"}, [2]string{"petstore.deletePet", "ask"})
	// The programs run as the bootstrap key, which may not decide its own
	// calls: another key decides.
	rv := reviewer(h)
	tryCall := "try:\n    r = cyrnel.services.petstore.%s\n    print('result', r['status'])\nexcept cyrnel.ToolError as e:\n    print('ToolError:', e)"

	t.Run("approve", func(t *testing.T) {
		// A 1.5 s timeout, and the approval comes later: suspended time
		// does not count.
		pid, a := approvalOf(t, h, fmt.Sprintf(tryCall, "getPetById(petId=5)"), 1500)
		if a.State != "pending" || a.PID == nil || *a.PID != pid || a.ServiceID != "petstore" || a.ToolID != "getPetById" || a.Parameters["petId"] != 5.0 {
			t.Fatalf("approval: %+v", a)
		}
		if time.Until(a.ExpiresAt) < 9*time.Minute {
			t.Fatalf("expires at %v: want the 10-minute default", a.ExpiresAt)
		}
		var p proc
		if h.do("GET", fmt.Sprintf("/processes/%d", pid), nil, &p); p.State != "suspended" {
			t.Fatalf("process while waiting: %+v", p)
		}
		var listed struct {
			Items []approvalView `json:"items"`
		}
		if h.do("GET", fmt.Sprintf("/approvals?state=pending&pid=%d", pid), nil, &listed); len(listed.Items) != 1 || listed.Items[0].ID != a.ID {
			t.Fatalf("pending approvals of %d: %+v", pid, listed)
		}
		time.Sleep(2 * time.Second) // past the timeout, which must not run while suspended
		if h.do("GET", fmt.Sprintf("/processes/%d", pid), nil, &p); p.State != "suspended" {
			t.Fatalf("process timed out while suspended: %+v", p)
		}
		before := up.count()
		var got approvalView
		if st, _ := rv.do("POST", "/approvals/"+a.ID+"/approve", nil, &got); st != 200 || got.State != "approved" || got.DecidedAt == nil {
			t.Fatalf("approve: %d %+v", st, got)
		}
		for _, verb := range []string{"approve", "deny"} {
			var prob problem
			if st, _ := rv.do("POST", "/approvals/"+a.ID+"/"+verb, nil, &prob); st != 409 {
				t.Fatalf("second decision (%s): %d %+v", verb, st, prob)
			}
		}
		p = h.wait(pid)
		if p.exit() != "success" || !strings.Contains(p.Stdout, "result 200") {
			t.Fatalf("approved process: %+v", p)
		}
		if n := up.count() - before; n != 1 {
			t.Fatalf("the approved call reached the upstream %d times", n)
		}
		var calls toolCallList
		h.do("GET", fmt.Sprintf("/processes/%d/tool-calls", pid), nil, &calls)
		if len(calls.Items) != 1 || calls.Items[0].Outcome != "success" || calls.Items[0].Policy != "ask" ||
			calls.Items[0].ApprovalID == nil || *calls.Items[0].ApprovalID != a.ID {
			t.Fatalf("audit of the approved call: %+v", calls)
		}
	})

	t.Run("deny", func(t *testing.T) {
		before := up.count()
		code := fmt.Sprintf(tryCall, "deletePet(petId=3, api_key="+fmt.Sprintf("%q", reverse(headerSecret))+"[::-1])")
		pid, a := approvalOf(t, h, code, 0)
		if a.Parameters["api_key"] != "[redacted]" {
			t.Fatalf("approval parameters: %+v", a.Parameters)
		}
		var raw string
		h.do("GET", "/approvals/"+a.ID, nil, &raw)
		noSecrets(t, "an approval", raw)
		// Listed and denied with the CLI.
		srv := []string{"--server", h.base}
		key := []string{"CYRNEL_API_KEY=" + rv.key}
		r := cli(t, t.TempDir(), "", key, append([]string{"approvals"}, srv...)...)
		if r.code != 0 || !strings.Contains(r.stdout, a.ID) || !strings.Contains(r.stdout, "petstore.deletePet") || strings.Contains(r.stdout, headerSecret) {
			t.Fatalf("cyrnel approvals: %+v", r)
		}
		if r = cli(t, t.TempDir(), "", key, append([]string{"approvals", "deny", a.ID}, srv...)...); r.code != 0 || !strings.Contains(r.stdout, "denied") {
			t.Fatalf("cyrnel approvals deny: %+v", r)
		}
		if r = cli(t, t.TempDir(), "", key, append([]string{"approvals", "approve", a.ID}, srv...)...); r.code != 1 || !strings.Contains(r.stderr, "409") {
			t.Fatalf("cyrnel approvals approve after deny: %+v", r)
		}
		p := h.wait(pid)
		if p.exit() != "success" || !strings.Contains(p.Stdout, "ToolError:") || !strings.Contains(p.Stdout, "denied") {
			t.Fatalf("denied process: %+v", p)
		}
		if up.count() != before {
			t.Fatalf("a denied call reached the upstream: %v", up.paths())
		}
		var calls toolCallList
		h.do("GET", fmt.Sprintf("/processes/%d/tool-calls", pid), nil, &raw)
		noSecrets(t, "the audit", raw)
		json.Unmarshal([]byte(raw), &calls)
		if len(calls.Items) != 1 || calls.Items[0].Outcome != "denied" || calls.Items[0].Parameters["api_key"] != "[redacted]" {
			t.Fatalf("audit of the denied call: %+v", calls)
		}
	})

	t.Run("kill while suspended", func(t *testing.T) {
		before := up.count()
		pid, a := approvalOf(t, h, fmt.Sprintf(tryCall, "getPetById(petId=6)"), 0)
		if st, _ := h.do("POST", fmt.Sprintf("/processes/%d/kill", pid), nil, nil); st != 200 {
			t.Fatalf("kill: %d", st)
		}
		p := h.wait(pid)
		if p.exit() != "canceled" || p.reason() != "killed" {
			t.Fatalf("killed while suspended: %+v", p)
		}
		var got approvalView
		if h.do("GET", "/approvals/"+a.ID, nil, &got); got.State != "expired" {
			t.Fatalf("approval of a killed process: %+v", got)
		}
		if st, _ := rv.do("POST", "/approvals/"+a.ID+"/approve", nil, nil); st != 409 {
			t.Fatalf("approving an expired approval: %d", st)
		}
		if up.count() != before {
			t.Fatalf("the call of a killed process reached the upstream: %v", up.paths())
		}
		var calls toolCallList
		h.do("GET", fmt.Sprintf("/processes/%d/tool-calls", pid), nil, &calls)
		if len(calls.Items) != 1 || calls.Items[0].Outcome != "denied" {
			t.Fatalf("audit of the killed call: %+v", calls)
		}
	})

	t.Run("concurrent calls", func(t *testing.T) {
		before := up.count()
		code := strings.Join([]string{
			"import asyncio",
			"s = cyrnel.services.petstore",
			"a, b = await asyncio.gather(s.getPetById.aio(petId=11), s.getPetById.aio(petId=12))",
			"print('results', a['status'], b['status'])",
		}, "\n")
		pid, _ := approvalOf(t, h, code, 0)
		var listed struct {
			Items []approvalView `json:"items"`
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			h.do("GET", fmt.Sprintf("/approvals?pid=%d", pid), nil, &listed)
			if len(listed.Items) == 2 || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if len(listed.Items) != 2 {
			t.Fatalf("approvals of two concurrent calls: %+v", listed)
		}
		for _, a := range listed.Items {
			if st, _ := rv.do("POST", "/approvals/"+a.ID+"/approve", nil, nil); st != 200 {
				t.Fatalf("approve %s: %d", a.ID, st)
			}
		}
		p := h.wait(pid)
		if p.exit() != "success" || !strings.Contains(p.Stdout, "results 200 200") {
			t.Fatalf("concurrent approved calls: %+v", p)
		}
		got := up.paths()[before:]
		if both := []string{"GET /pet/11", "GET /pet/12"}; len(got) != 2 || !slices.Contains(got, both[0]) || !slices.Contains(got, both[1]) {
			t.Fatalf("upstream saw %v, want each approved call once", got)
		}
	})
}

func TestApprovalFromMCP(t *testing.T) {
	t.Parallel()
	h, up := governed(t, "")
	setPolicies(t, h, "allow", [2]string{"petstore.getPetById", "ask"})
	s := mcpSession(t, h)
	// The endpoint is stateless (no elicitation): run_code answers that the
	// program waits on an approval, and how to decide it.
	r := call(t, s, "run_code", map[string]any{"code": "r = cyrnel.services.petstore.getPetById(petId=21)\ncyrnel.output({'s': r['status']})"})
	out := structured[struct {
		PID     int64          `json:"pid"`
		Pending []approvalView `json:"pendingApprovals"`
	}](t, r)
	if len(out.Pending) != 1 || out.Pending[0].ToolID != "getPetById" || !strings.Contains(textOf(r), "/approvals/{id}/approve") {
		t.Fatalf("run_code with a pending approval: %s %+v", textOf(r), out)
	}
	if up.count() != 0 {
		t.Fatal("the call went out before its approval")
	}
	if st, _ := reviewer(h).do("POST", "/approvals/"+out.Pending[0].ID+"/approve", nil, nil); st != 200 {
		t.Fatalf("approve: %d", st)
	}
	if p := h.wait(out.PID); p.exit() != "success" || p.Output["s"] != 200.0 || up.count() != 1 {
		t.Fatalf("after the approval: %+v, upstream %v", p, up.paths())
	}
}

func TestApprovalExpires(t *testing.T) {
	t.Parallel()
	h, up := governed(t, "", "CYRNEL_APPROVAL_TTL=1s")
	setPolicies(t, h, "ask")
	pid, a := approvalOf(t, h, "try:\n    cyrnel.services.petstore.getPetById(petId=1)\nexcept cyrnel.ToolError as e:\n    print('ToolError:', e)", 0)
	p := h.wait(pid)
	if p.exit() != "success" || !strings.Contains(p.Stdout, "expired") {
		t.Fatalf("expired approval: %+v", p)
	}
	var got approvalView
	if h.do("GET", "/approvals/"+a.ID, nil, &got); got.State != "expired" {
		t.Fatalf("approval after its time: %+v", got)
	}
	if up.count() != 0 {
		t.Fatalf("an expired call reached the upstream: %v", up.paths())
	}
}

// A TypeScript program's timeout stops while its call waits on a human, as
// a Python program's does (TestApprovals/approve).
func TestTypeScriptSuspendedTimeDoesNotCount(t *testing.T) {
	t.Parallel()
	h, up := governed(t, "")
	if st, _ := h.do("PUT", "/environment", map[string]any{"module": "typescript"}, nil); st != 200 {
		t.Fatalf("switch to typescript: %d", st)
	}
	setPolicies(t, h, "allow", [2]string{"petstore.getPetById", "ask"})
	const timeoutMs = 1000
	pid, a := approvalOf(t, h, `const r = await cyrnel.services.petstore.tools.getPetById.invoke({ petId: 5 }); console.log("result", r.status);`, timeoutMs)
	// The decision comes well past the timeout: this wait is the test.
	time.Sleep(2 * timeoutMs * time.Millisecond)
	if st, _ := reviewer(h).do("POST", "/approvals/"+a.ID+"/approve", nil, nil); st != 200 {
		t.Fatalf("approve: %d", st)
	}
	if p := h.wait(pid); p.exit() != "success" || !strings.Contains(p.Stdout, "result 200") || up.count() != 1 {
		t.Fatalf("approved TypeScript process: %+v, upstream %v", p, up.paths())
	}
}

func TestRestartWhileSuspended(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h, up := governed(t, dir)
	setPolicies(t, h, "ask")
	rv := reviewer(h)
	pid, a := approvalOf(t, h, "cyrnel.services.petstore.getPetById(petId=1)", 0)
	// A crash, not a shutdown: nothing gets to tidy up.
	h.cmd.Process.Kill()
	<-h.exited
	h2 := start(t, dir)
	var p proc
	h2.do("GET", fmt.Sprintf("/processes/%d", pid), nil, &p)
	if p.State != "idle" || p.exit() != "failed" || p.reason() != "host_restart" {
		t.Fatalf("suspended process after a restart: %+v", p)
	}
	var got approvalView
	if h2.do("GET", "/approvals/"+a.ID, nil, &got); got.State != "expired" {
		t.Fatalf("approval after a restart: %+v", got)
	}
	if st, _ := h2.withKey(rv.key).do("POST", "/approvals/"+a.ID+"/approve", nil, nil); st != 409 {
		t.Fatalf("approving after a restart: %d", st)
	}
	if up.count() != 0 {
		t.Fatalf("the call reached the upstream: %v", up.paths())
	}
}
