package api

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"testing"

	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/audit"
	"github.com/cyrnel/cyrnel/host/policy"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/schema"
)

// TestToolPolicies: the set is returned as stored; a field the domain
// refuses (rules[2].pattern) is located in the body, which is the set.
func TestToolPolicies(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	set := map[string]any{"default": "ask", "rules": []any{map[string]any{"pattern": "pets.get*", "decision": "allow"}}}
	var got policy.Set
	wantStatus(t, f.api.Put("/tool-policies", set), http.StatusOK, &got)
	if got.Default != policy.Ask || len(got.Rules) != 1 || got.Rules[0].Pattern != "pets.get*" {
		t.Errorf("put answered %+v", got)
	}
	wantStatus(t, f.api.Get("/tool-policies"), http.StatusOK, &got)
	if got.Default != policy.Ask {
		t.Errorf("get %+v", got)
	}
	f.policies.err = &schema.FieldError{Field: "rules[2].pattern", Message: "not a valid glob"}
	wantProblem(t, f.api.Put("/tool-policies", set), http.StatusUnprocessableEntity, "body.rules[2].pattern")
}

// TestApprovals: newest first, paged by cursor; deciding one twice is 409,
// an unknown one 404.
func TestApprovals(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, id := range []string{"apr_3", "apr_2", "apr_1"} {
		f.approvals.items = append(f.approvals.items, approval.Approval{ID: id, State: "pending", ServiceID: "a", ToolID: "x"})
	}
	var pg struct {
		Items      []Approval `json:"items"`
		NextCursor *string    `json:"nextCursor"`
	}
	wantStatus(t, f.api.Get("/approvals?limit=2&state=pending&pid=4"), http.StatusOK, &pg)
	if l := f.approvals.listed; l.State != "pending" || l.PID != 4 || l.Limit != 2 || len(pg.Items) != 2 || pg.NextCursor == nil {
		t.Fatalf("first page %+v from %+v", pg, l)
	}
	wantStatus(t, f.api.Get("/approvals?limit=2&cursor="+*pg.NextCursor), http.StatusOK, &pg)
	if len(pg.Items) != 1 || pg.Items[0].ID != "apr_1" || pg.NextCursor != nil {
		t.Errorf("second page %+v", pg)
	}
	wantProblem(t, f.api.Get("/approvals?cursor=%21"), http.StatusUnprocessableEntity, "query.cursor")
	var a Approval
	wantStatus(t, f.api.Post("/approvals/apr_2/approve"), http.StatusOK, &a)
	if a.State != "approved" {
		t.Errorf("approve answered %+v", a)
	}
	wantProblem(t, f.api.Post("/approvals/apr_2/deny"), http.StatusConflict)
	wantStatus(t, f.api.Post("/approvals/apr_1/deny"), http.StatusOK, &a)
	if a.State != "denied" {
		t.Errorf("deny answered %+v", a)
	}
	wantProblem(t, f.api.Get("/approvals/apr_9"), http.StatusNotFound)
	f = newFixture(t)
	var empty map[string]any
	wantStatus(t, f.api.Get("/approvals"), http.StatusOK, &empty)
	if items, ok := empty["items"].([]any); !ok || len(items) != 0 {
		t.Errorf("no approvals: %v", empty)
	}
}

// TestToolCalls: the audit pages by id cursor, filters reach the domain;
// a process's calls need the process (404 otherwise).
func TestToolCalls(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	pid := int64(7)
	for id := int64(5); id >= 1; id-- {
		f.calls.calls = append(f.calls.calls, audit.Call{ID: id, PID: &pid, ServiceID: "a", ToolID: "x", Outcome: "success"})
	}
	var ids []int64
	path := "/tool-calls?limit=2&serviceId=a&toolId=x&outcome=success"
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatalf("more pages than 5 calls in 2s make: %v", ids)
		}
		var pg struct {
			Items      []audit.Call `json:"items"`
			NextCursor *string      `json:"nextCursor"`
		}
		wantStatus(t, f.api.Get(path), http.StatusOK, &pg)
		if l := f.calls.listed; l.ServiceID != "a" || l.ToolID != "x" || l.Outcome != "success" || l.Limit != 2 {
			t.Errorf("filter %+v", l)
		}
		for _, c := range pg.Items {
			ids = append(ids, c.ID)
		}
		if pg.NextCursor == nil {
			break
		}
		path = "/tool-calls?limit=2&serviceId=a&toolId=x&outcome=success&cursor=" + *pg.NextCursor
	}
	if fmt.Sprint(ids) != "[5 4 3 2 1]" {
		t.Errorf("pages gave %v", ids)
	}
	for _, bad := range []string{"%21", base64.RawURLEncoding.EncodeToString([]byte("0")), base64.RawURLEncoding.EncodeToString([]byte("x1"))} {
		wantProblem(t, f.api.Get("/tool-calls?cursor="+bad), http.StatusUnprocessableEntity, "query.cursor")
	}
	wantProblem(t, f.api.Get("/processes/7/tool-calls"), http.StatusNotFound)
	f.procs.procs = []*process.Process{{ProcessSummary: process.ProcessSummary{PID: 7}}}
	var pg struct{ Items []audit.Call }
	wantStatus(t, f.api.Get("/processes/7/tool-calls?limit=100"), http.StatusOK, &pg)
	if f.calls.listed.PID != 7 || len(pg.Items) != 5 {
		t.Errorf("calls of process 7: %d, filter %+v", len(pg.Items), f.calls.listed)
	}
}
