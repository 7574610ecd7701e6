package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
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
