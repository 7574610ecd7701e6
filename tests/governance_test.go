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

const (
	serviceSecret = "svc-secret-5b1e0c"
	headerSecret  = "hdr-secret-a7d24f"
)

// governed starts a host with the petstore service pointed at a recording
// upstream, its api_key secret set.
func governed(t *testing.T, dataDir string, env ...string) (*host, *upstream) {
	t.Helper()
	h := start(t, dataDir, env...)
	up := newUpstream(t)
	addPetstore(t, h, up)
	return h, up
}

func addPetstore(t *testing.T, h *host, up *upstream) {
	t.Helper()
	var svc struct {
		Enabled bool `json:"enabled"`
	}
	st, _ := h.do("POST", "/services", map[string]any{
		"id": "petstore", "adapter": "openapi", "source": map[string]any{"content": fixture(t, "swagger-petstore-3.0.yaml")},
		"config":  map[string]any{"serverUrl": up.URL, "allowPrivateNetwork": true},
		"secrets": map[string]any{"api_key": serviceSecret},
	}, &svc)
	if st != http.StatusCreated || !svc.Enabled {
		t.Fatalf("import petstore: %d %+v", st, svc)
	}
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.reqs)
}

func (u *upstream) paths() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []string
	for _, r := range u.reqs {
		out = append(out, r.Method+" "+r.Path)
	}
	return out
}

func setPolicies(t *testing.T, h *host, def string, rules ...[2]string) {
	t.Helper()
	rs := []map[string]string{}
	for _, r := range rules {
		rs = append(rs, map[string]string{"pattern": r[0], "decision": r[1]})
	}
	if st, _ := h.do("PUT", "/tool-policies", map[string]any{"default": def, "rules": rs}, nil); st != http.StatusOK {
		t.Fatalf("set policies: %d", st)
	}
}

type toolCall struct {
	ID         int64          `json:"id"`
	PID        *int64         `json:"pid"`
	ServiceID  string         `json:"serviceId"`
	ToolID     string         `json:"toolId"`
	Policy     string         `json:"policy"`
	ApprovalID *string        `json:"approvalId"`
	Outcome    string         `json:"outcome"`
	Status     *int           `json:"status"`
	Source     string         `json:"source"`
	Parameters map[string]any `json:"parameters"`
	KeyID      string         `json:"keyId"`
}

type toolCallList struct {
	Items      []toolCall `json:"items"`
	HasMore    bool       `json:"hasMore"`
	NextCursor *string    `json:"nextCursor"`
}

type approvalView struct {
	ID         string         `json:"id"`
	State      string         `json:"state"`
	PID        *int64         `json:"pid"`
	ServiceID  string         `json:"serviceId"`
	ToolID     string         `json:"toolId"`
	Parameters map[string]any `json:"parameters"`
	ExpiresAt  time.Time      `json:"expiresAt"`
	DecidedAt  *time.Time     `json:"decidedAt"`
	KeyID      string         `json:"keyId"`
	DecidedBy  string         `json:"decidedBy"`
}

// noSecrets fails when a raw body holds a secret.
func noSecrets(t *testing.T, what, raw string) {
	t.Helper()
	for _, s := range []string{serviceSecret, headerSecret} {
		if strings.Contains(raw, s) {
			t.Fatalf("%s holds a secret: %s", what, raw)
		}
	}
}

func TestToolPoliciesAndAudit(t *testing.T) {
	t.Parallel()
	h, up := governed(t, "")

	var set struct {
		Default string `json:"default"`
		Rules   []any  `json:"rules"`
	}
	if st, _ := h.do("GET", "/tool-policies", nil, &set); st != 200 || set.Default != "allow" || set.Rules == nil || len(set.Rules) != 0 {
		t.Fatalf("initial policies: %d %+v", st, set)
	}
	// A bad list is refused whole, naming the failing field.
	var prob problem
	st, _ := h.do("PUT", "/tool-policies", map[string]any{"default": "allow", "rules": []any{
		map[string]any{"pattern": "petstore.*", "decision": "block"}, map[string]any{"pattern": "x.*", "decision": "allow"},
		map[string]any{"pattern": "[", "decision": "block"},
	}}, &prob)
	if st != 422 || len(prob.Errors) != 1 || prob.Errors[0].Location != "body.rules[2].pattern" {
		t.Fatalf("bad pattern: %d %+v", st, prob)
	}
	if st, _ := h.do("PUT", "/tool-policies", map[string]any{"default": "allow", "rules": []any{map[string]any{"pattern": "a", "decision": "maybe"}}}, &prob); st != 422 || prob.Errors[0].Location != "body.rules[0].decision" {
		t.Fatalf("bad decision: %d %+v", st, prob)
	}
	if h.do("GET", "/tool-policies", nil, &set); len(set.Rules) != 0 {
		t.Fatalf("a refused list changed the policies: %+v", set)
	}

	setPolicies(t, h, "allow", [2]string{"petstore.deletePet", "block"}, [2]string{"petstore.get*", "allow"}, [2]string{"petstore.*", "ask"})
	var tools struct {
		Items []struct {
			ID     string `json:"id"`
			Policy string `json:"policy"`
		} `json:"items"`
	}
	h.do("GET", "/tools?serviceId=petstore&limit=100", nil, &tools)
	want := map[string]string{"deletePet": "block", "getPetById": "allow", "addPet": "ask"}
	for _, it := range tools.Items {
		if w, ok := want[it.ID]; ok && it.Policy != w {
			t.Errorf("listing: %s policy %s, want %s", it.ID, it.Policy, w)
		}
		delete(want, it.ID)
	}
	if len(want) != 0 {
		t.Fatalf("tools missing from the listing: %v", want)
	}
	var tool struct {
		Policy string `json:"policy"`
	}
	if h.do("GET", "/tools/petstore/deletePet", nil, &tool); tool.Policy != "block" {
		t.Fatalf("getTool policy: %+v", tool)
	}

	// Blocked from code: a ToolError that says so, and nothing is sent.
	p := h.run(strings.Join([]string{
		"try:",
		"    cyrnel.services.petstore.deletePet(petId=1, api_key=" + fmt.Sprintf("%q", reverse(headerSecret)) + "[::-1])",
		"except cyrnel.ToolError as e:",
		"    print('ToolError:', e)",
		"r = cyrnel.services.petstore.getPetById(petId=7)",
		"n = cyrnel.services.petstore.getPetById(petId=404)",
		"try:",
		"    cyrnel.services.petstore.getPetById(petId='seven')",
		"except cyrnel.ToolError:",
		"    pass",
	}, "\n"), nil)
	if p.exit() != "success" || !strings.Contains(p.Stdout, "ToolError:") || !strings.Contains(p.Stdout, "blocked") {
		t.Fatalf("blocked call from code: %+v", p)
	}
	if got := up.paths(); len(got) != 2 || got[0] != "GET /pet/7" || got[1] != "GET /pet/404" {
		t.Fatalf("upstream saw %v, want only the two allowed calls", got)
	}

	// From the API: block and ask are 403 problems, and nothing is sent.
	if st, _ := h.do("POST", "/tools/petstore/deletePet/invoke", map[string]any{"parameters": map[string]any{"petId": 2, "api_key": headerSecret}}, &prob); st != 403 || !strings.Contains(prob.Detail, "blocked") {
		t.Fatalf("blocked invoke: %d %+v", st, prob)
	}
	if st, _ := h.do("POST", "/tools/petstore/addPet/invoke", map[string]any{"parameters": map[string]any{"body": map[string]any{"name": "rex", "photoUrls": []string{}}}}, &prob); st != 403 || !strings.Contains(prob.Detail, "approval") {
		t.Fatalf("ask invoke: %d %+v", st, prob)
	}
	if st, _ := h.do("POST", "/tools/petstore/getPetById/invoke", map[string]any{"parameters": map[string]any{"petId": 9}}, nil); st != 200 {
		t.Fatalf("allowed invoke: %d", st)
	}
	if n := up.count(); n != 3 {
		t.Fatalf("upstream saw %d requests, want 3: %v", n, up.paths())
	}

	// Every call is in the audit, newest first, with its outcome.
	var raw string
	h.do("GET", "/tool-calls?serviceId=petstore&limit=100", nil, &raw)
	noSecrets(t, "the audit", raw)
	var calls toolCallList
	if err := json.Unmarshal([]byte(raw), &calls); err != nil {
		t.Fatal(err)
	}
	type row struct{ tool, policy, outcome, source string }
	var got []row
	for _, c := range calls.Items {
		got = append(got, row{c.ToolID, c.Policy, c.Outcome, c.Source})
	}
	wantRows := []row{
		{"getPetById", "allow", "success", "api"},
		{"addPet", "ask", "denied", "api"},
		{"deletePet", "block", "blocked", "api"},
		{"getPetById", "allow", "invalid", "code"},
		{"getPetById", "allow", "upstream_error", "code"},
		{"getPetById", "allow", "success", "code"},
		{"deletePet", "block", "blocked", "code"},
	}
	if fmt.Sprint(got) != fmt.Sprint(wantRows) {
		t.Fatalf("audit:\n got %v\nwant %v", got, wantRows)
	}
	if c := calls.Items[4]; c.Status == nil || *c.Status != 404 || c.PID == nil || *c.PID != p.PID {
		t.Fatalf("upstream error record: %+v", c)
	}
	if c := calls.Items[6]; c.Parameters["api_key"] != "[redacted]" || c.Parameters["petId"] != 1.0 {
		t.Fatalf("blocked record parameters: %+v", c.Parameters)
	}
	if c := calls.Items[0]; c.PID != nil {
		t.Fatalf("an API call carries a pid: %+v", c)
	}

	// Filters and pages.
	var page toolCallList
	h.do("GET", fmt.Sprintf("/processes/%d/tool-calls", p.PID), nil, &page)
	if len(page.Items) != 4 {
		t.Fatalf("process tool calls: %+v", page)
	}
	h.do("GET", "/tool-calls?outcome=blocked", nil, &page)
	if len(page.Items) != 2 {
		t.Fatalf("outcome filter: %+v", page)
	}
	page = toolCallList{}
	h.do("GET", "/tool-calls?toolId=getPetById&limit=2", nil, &page)
	if len(page.Items) != 2 || !page.HasMore || page.NextCursor == nil {
		t.Fatalf("first page: %+v", page)
	}
	first, cursor := page.Items, *page.NextCursor
	page = toolCallList{}
	h.do("GET", "/tool-calls?toolId=getPetById&limit=2&cursor="+cursor, nil, &page)
	if len(page.Items) != 2 || page.HasMore || page.Items[0].ID >= first[1].ID {
		t.Fatalf("second page: %+v after %+v", page, first)
	}
	if st, _ := h.do("GET", "/tool-calls?cursor=!!", nil, &prob); st != 422 || prob.Errors[0].Location != "query.cursor" {
		t.Fatalf("bad cursor: %d %+v", st, prob)
	}
}

// approvalOf runs code whose calls need approval and returns the pid and
// the first approval, read from the process's event stream (live, or in its
// replay), once the process is suspended.
func approvalOf(t *testing.T, h *host, code string, timeoutMs int) (int64, approvalView) {
	t.Helper()
	var p proc
	body := map[string]any{"code": code}
	if timeoutMs > 0 {
		body["timeoutMs"] = timeoutMs
	}
	h.do("POST", "/processes", body, &p)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/processes/%d/events", h.base, p.PID), nil)
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
			t.Fatalf("process %d ended before asking for an approval: %s", p.PID, data)
		}
		if a.ID != "" && suspended {
			return p.PID, a
		}
	}
	t.Fatalf("process %d: no approval (%v)", p.PID, sc.Err())
	return 0, a
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

func TestRankedToolSearch(t *testing.T) {
	t.Parallel()
	h, _ := governed(t, "")
	var list struct {
		Items []struct {
			ID     string   `json:"id"`
			Policy string   `json:"policy"`
			Score  *float64 `json:"score"`
		} `json:"items"`
		HasMore    bool    `json:"hasMore"`
		NextCursor *string `json:"nextCursor"`
	}
	if st, _ := h.do("GET", "/tools?q=find+pets+by+their+status&limit=2", nil, &list); st != 200 || len(list.Items) != 2 || list.Items[0].ID != "findPetsByStatus" {
		t.Fatalf("ranked search: %d %+v", st, list)
	}
	if s0, s1 := list.Items[0].Score, list.Items[1].Score; s0 == nil || s1 == nil || *s0 < *s1 || list.Items[0].Policy != "allow" || !list.HasMore {
		t.Fatalf("scores and pages: %+v", list)
	}
	first := list.Items[0].ID
	cursor := *list.NextCursor
	list.Items = nil
	if h.do("GET", "/tools?q=find+pets+by+their+status&limit=2&cursor="+cursor, nil, &list); len(list.Items) == 0 || list.Items[0].ID == first {
		t.Fatalf("second page: %+v", list)
	}
	p := h.run("m = cyrnel.search_tools('remove a pet from the store', limit=3)\ncyrnel.output({'first': m[0]['toolId'], 'n': len(m), 'score': m[0]['score']})", nil)
	if p.exit() != "success" || p.Output["first"] != "deletePet" || p.Output["n"] != 3.0 || p.Output["score"].(float64) <= 0 {
		t.Fatalf("search from Python: %+v", p)
	}
}
