package api

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/gate"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/services"
)

func someTools() []services.Tool {
	var out []services.Tool
	for _, id := range [][2]string{{"a", "x"}, {"a", "y"}, {"b", "x"}, {"b", "z"}, {"c", "q"}} {
		out = append(out, services.Tool{ToolSummary: services.ToolSummary{ServiceID: id[0], ID: id[1], Enabled: true}})
	}
	return out
}

// TestListToolsPages: the filters reach the domain; nextCursor leads
// through every tool once, each with its policy; a cursor not from this API
// is 422 at query.cursor.
func TestListToolsPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.tools.tools = someTools()
	type page struct {
		Items      []toolItem `json:"items"`
		NextCursor *string    `json:"nextCursor"`
	}
	var got []string
	path := "/tools?limit=2&enabled=true"
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatalf("more pages than 5 tools in 2s make: %v", got)
		}
		var pg page
		wantStatus(t, f.api.Get(path), http.StatusOK, &pg)
		if l := f.tools.listed; l.Enabled == nil || !*l.Enabled || l.Limit != 2 {
			t.Errorf("filter %+v", l)
		}
		for _, it := range pg.Items {
			got = append(got, it.ServiceID+"."+it.ID+":"+string(it.Policy))
		}
		if pg.NextCursor == nil {
			break
		}
		path = "/tools?limit=2&enabled=true&cursor=" + *pg.NextCursor
	}
	if fmt.Sprint(got) != "[a.x:allow a.y:allow b.x:allow b.z:block c.q:allow]" {
		t.Errorf("pages gave %v", got)
	}
	wantStatus(t, f.api.Get("/tools?enabled=false"), http.StatusOK, nil)
	if l := f.tools.listed; l.Enabled == nil || *l.Enabled {
		t.Errorf("enabled=false reached the domain as %v", l.Enabled)
	}
	for _, bad := range []string{"%25", "YQ" /* "a" without a separator */, "AHg" /* no service */} {
		wantProblem(t, f.api.Get("/tools?cursor="+bad), http.StatusUnprocessableEntity, "query.cursor")
	}
	wantProblem(t, f.api.Get("/tools?serviceId=1x"), http.StatusUnprocessableEntity, "query.serviceId")
}

// TestSearchToolsRanksAndPagesByPosition: with words in q the listing is
// the domain's ranked search, each item with its score; its cursor is a
// position, not a tool.
func TestSearchToolsRanksAndPagesByPosition(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.tools.tools = someTools()
	var pg struct {
		Items      []toolItem `json:"items"`
		NextCursor *string    `json:"nextCursor"`
	}
	wantStatus(t, f.api.Get("/tools?q=x&limit=1&serviceId=a"), http.StatusOK, &pg)
	if s := f.tools.searched; s.Query != "x" || s.ServiceID != "a" || s.Offset != 0 || s.Limit != 1 {
		t.Errorf("search %+v", s)
	}
	if len(pg.Items) != 1 || pg.Items[0].ID != "x" || pg.Items[0].Score == nil || *pg.Items[0].Score != 5 || pg.NextCursor == nil {
		t.Fatalf("first page %+v", pg)
	}
	wantStatus(t, f.api.Get("/tools?q=x&limit=1&cursor="+*pg.NextCursor), http.StatusOK, &pg)
	if f.tools.searched.Offset != 1 || len(pg.Items) != 1 || pg.Items[0].ServiceID != "b" || pg.NextCursor != nil {
		t.Errorf("second page %+v after offset %d", pg, f.tools.searched.Offset)
	}
	for _, bad := range []string{"eA" /* "x" */, "Iy0x" /* "#-1" */} {
		wantProblem(t, f.api.Get("/tools?q=x&cursor="+bad), http.StatusUnprocessableEntity, "query.cursor")
	}
}

// TestInvokeLocatesParameters: the domain says parameters (it says so to
// programs too); the API locates it and each failing path in the body. The
// call goes through the gate, as from the API.
func TestInvokeLocatesParameters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.gate.err = &module.ToolError{Code: module.ToolInvalidParameters, Err: &schema.FieldError{
		Field: "parameters", Message: "invalid parameters for a.x", Problems: []schema.Problem{{Path: "/petId", Message: "want integer"}, {Path: "", Message: "missing q"}},
	}}
	p := wantProblem(t, f.api.Post("/tools/a/x/invoke", map[string]any{"parameters": map[string]any{"petId": "one"}}),
		http.StatusUnprocessableEntity, "body.parameters.petId", "body.parameters")
	if p.Detail != "invalid parameters for a.x" {
		t.Errorf("detail %q", p.Detail)
	}
	f = newFixture(t)
	f.gate.result = map[string]any{"status": 200}
	var out struct{ Result map[string]any }
	wantStatus(t, f.api.Post("/tools/a/x/invoke", map[string]any{"parameters": map[string]any{"petId": 1}}), http.StatusOK, &out)
	if in := f.gate.invoked; out.Result["status"] != 200.0 || in.ServiceID != "a" || in.ToolID != "x" || in.Parameters["petId"] != 1.0 || f.gate.src != gate.FromAPI {
		t.Errorf("result %v from %+v (%s)", out.Result, in, f.gate.src)
	}
	for err, status := range map[error]int{
		fmt.Errorf("a.x: %w", services.ErrUnavailable):      http.StatusConflict,
		fmt.Errorf("a.x: %w: timeout", services.ErrAdapter): http.StatusBadGateway,
		fmt.Errorf("a.x: %w", gate.ErrBlocked):              http.StatusForbidden,
		fmt.Errorf("a.x: %w", gate.ErrNeedsApproval):        http.StatusForbidden,
		fmt.Errorf("a.x: %w: apr_1", gate.ErrDenied):        http.StatusForbidden,
	} {
		f.gate.err = err
		wantProblem(t, f.api.Post("/tools/a/x/invoke", map[string]any{}), status)
	}
}

// TestToolDocsAreMarkdown from the active environment, for the tool asked;
// without an environment 503.
func TestToolDocsAreMarkdown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.tools.tools = someTools()
	wantProblem(t, f.api.Get("/tools/a/x/docs"), http.StatusServiceUnavailable)
	f.env.env = &fakeEnv{}
	rec := f.api.Get("/tools/a/x/docs")
	wantStatus(t, rec, http.StatusOK, nil)
	if ct := rec.Header().Get("Content-Type"); ct != "text/markdown; charset=utf-8" {
		t.Errorf("Content-Type %q", ct)
	}
	if body := readAll(t, rec.Body); body != "## a.x" || f.env.env.docsFor.ToolID != "x" {
		t.Errorf("docs %q for %+v", body, f.env.env.docsFor)
	}
	wantProblem(t, f.api.Get("/tools/a/nope/docs"), http.StatusNotFound)
	var tool map[string]any
	wantStatus(t, f.api.Patch("/tools/b/z", map[string]any{"enabled": false}), http.StatusOK, &tool)
	if tool["enabled"] != false || f.tools.tools[3].Enabled || tool["policy"] != "block" {
		t.Errorf("patch answered %v", tool)
	}
}
