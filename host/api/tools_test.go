package api

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
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
// through every tool once; a cursor not from this API is 422 at
// query.cursor.
func TestListToolsPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.tools.tools = someTools()
	type page struct {
		Items      []services.ToolSummary `json:"items"`
		NextCursor *string                `json:"nextCursor"`
	}
	var got []string
	path := "/tools?limit=2&enabled=true&q=pet"
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatalf("more pages than 5 tools in 2s make: %v", got)
		}
		var pg page
		wantStatus(t, f.api.Get(path), http.StatusOK, &pg)
		if l := f.tools.listed; l.Enabled == nil || !*l.Enabled || l.Query != "pet" || l.Limit != 2 {
			t.Errorf("filter %+v", l)
		}
		for _, it := range pg.Items {
			got = append(got, it.ServiceID+"."+it.ID)
		}
		if pg.NextCursor == nil {
			break
		}
		path = "/tools?limit=2&enabled=true&q=pet&cursor=" + *pg.NextCursor
	}
	if fmt.Sprint(got) != "[a.x a.y b.x b.z c.q]" {
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

// TestInvokeLocatesParameters: the domain says parameters (it says so to
// programs too); the API locates it and each failing path in the body.
func TestInvokeLocatesParameters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.tools.err = &module.ToolError{Code: module.ToolInvalidParameters, Err: &schema.FieldError{
		Field: "parameters", Message: "invalid parameters for a.x", Problems: []schema.Problem{{Path: "/petId", Message: "want integer"}, {Path: "", Message: "missing q"}},
	}}
	p := wantProblem(t, f.api.Post("/tools/a/x/invoke", map[string]any{"parameters": map[string]any{"petId": "one"}}),
		http.StatusUnprocessableEntity, "body.parameters.petId", "body.parameters")
	if p.Detail != "invalid parameters for a.x" {
		t.Errorf("detail %q", p.Detail)
	}
	f = newFixture(t)
	f.tools.result = map[string]any{"status": 200}
	var out struct{ Result map[string]any }
	wantStatus(t, f.api.Post("/tools/a/x/invoke", map[string]any{"parameters": map[string]any{"petId": 1}}), http.StatusOK, &out)
	if out.Result["status"] != 200.0 || f.tools.invoked.ServiceID != "a" || f.tools.invoked.ToolID != "x" || f.tools.invoked.Parameters["petId"] != 1.0 {
		t.Errorf("result %v from %+v", out.Result, f.tools.invoked)
	}
	f.tools.err = fmt.Errorf("a.x: %w", services.ErrUnavailable)
	wantProblem(t, f.api.Post("/tools/a/x/invoke", map[string]any{}), http.StatusConflict)
	f.tools.err = fmt.Errorf("a.x: %w: timeout", services.ErrAdapter)
	wantProblem(t, f.api.Post("/tools/a/x/invoke", map[string]any{}), http.StatusBadGateway)
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
	var tool services.Tool
	wantStatus(t, f.api.Patch("/tools/b/z", map[string]any{"enabled": false}), http.StatusOK, &tool)
	if tool.Enabled || f.tools.tools[3].Enabled {
		t.Error("patch did not disable b.z")
	}
}
