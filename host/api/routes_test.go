package api

import (
	"net/http"
	"testing"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"
)

// TestEveryRouteHasARole: every route the router answers (huma's
// operations, the spec, /mcp, /metrics) has an entry in the route table, and every
// entry names a route that exists: a route added without deciding who may
// use it fails here.
func TestEveryRouteHasARole(t *testing.T) {
	t.Parallel()
	h, a := New(Deps{MCP: http.NotFoundHandler(), Metrics: http.NotFoundHandler()})
	seen := map[string]bool{}
	err := chi.Walk(h.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		seen[method+" "+route] = true
		if _, ok := rolesFor(method, route); !ok {
			t.Errorf("route %s %s has no entry in the route table", method, route)
		} else if _, wild := routeTable["* "+route]; wild {
			seen["* "+route] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for path, item := range a.OpenAPI().Paths {
		for method, op := range map[string]*huma.Operation{"GET": item.Get, "POST": item.Post, "PUT": item.Put, "PATCH": item.Patch, "DELETE": item.Delete} {
			if op != nil && !seen[method+" "+path] {
				t.Errorf("operation %s %s is not routed as the table names it", method, path)
			}
		}
	}
	for key := range routeTable {
		if !seen[key] {
			t.Errorf("route table entry %s names no route", key)
		}
	}
}
