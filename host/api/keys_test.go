package api

import (
	"bytes"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/cyrnel/cyrnel/host/caller"
)

// keyFor is a fake key per role, and the keys that authenticate them.
var keyFor = map[caller.Role]string{caller.Runner: "run", caller.Approver: "appr", caller.Admin: "adm"}

func roleKeys() *fakeKeys {
	k := &fakeKeys{keys: map[string]caller.Caller{}}
	for r, key := range keyFor {
		k.keys[key] = caller.Caller{KeyID: "key_" + key, Roles: []caller.Role{r}}
	}
	return k
}

// concrete fills a route pattern's parameters.
func concrete(pattern string) string {
	r := strings.NewReplacer("{pid}", "1", "{id}", "x", "{path}", "f.txt", "{serviceId}", "s", "{toolId}", "t")
	return r.Replace(pattern)
}

// designAllows is DESIGN §13's table of roles, written out apart from the
// route table so that a wrong entry there is caught: runner: processes,
// sessions and their files, GET /tools*, tool invoke, GET /environment*,
// MCP; approver: approvals, the audit of tool calls, reading processes;
// admin: everything. Nil: no key needed.
func designAllows(method, pattern string) []caller.Role {
	switch {
	case pattern == "/health", pattern == "/health/ready", strings.HasPrefix(pattern, "/openapi"):
		return nil
	case strings.HasPrefix(pattern, "/processes") && method == http.MethodGet:
		return []caller.Role{caller.Runner, caller.Approver, caller.Admin}
	case strings.HasPrefix(pattern, "/processes"), strings.HasPrefix(pattern, "/sessions"), pattern == "/mcp",
		strings.HasPrefix(pattern, "/tools") && (method == http.MethodGet || strings.HasSuffix(pattern, "/invoke")),
		strings.HasPrefix(pattern, "/environment") && method == http.MethodGet:
		return []caller.Role{caller.Runner, caller.Admin}
	case strings.HasPrefix(pattern, "/approvals"), pattern == "/tool-calls":
		return []caller.Role{caller.Approver, caller.Admin}
	}
	return []caller.Role{caller.Admin}
}

// TestRolesAreEnforced: for every route and every role, a key of that role
// gets 403 exactly when DESIGN §13 does not allow it, and no key gets 401
// on every route that needs one. The admin key is the control: every route
// lets it through, so a 403 elsewhere is the roles' doing.
func TestRolesAreEnforced(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, roleKeys())
	h, _ := New(Deps{MCP: http.NotFoundHandler()})
	var routes [][2]string
	chi.Walk(h.(chi.Routes), func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if method == http.MethodGet || method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch || method == http.MethodDelete {
			routes = append(routes, [2]string{method, route})
		}
		return nil
	})
	if len(routes) < 60 {
		t.Fatalf("only %d routes", len(routes))
	}
	for _, rt := range routes {
		method, path := rt[0], concrete(rt[1])
		roles := designAllows(rt[0], rt[1])
		if roles == nil {
			if rec := f.api.Do(method, path); rec.Code == http.StatusUnauthorized || rec.Code == http.StatusForbidden {
				t.Errorf("%s %s needs no key, got %d", method, path, rec.Code)
			}
			continue
		}
		if rec := f.api.Do(method, path); rec.Code != http.StatusUnauthorized {
			t.Errorf("%s %s without a key: %d, want 401", method, path, rec.Code)
		}
		for _, role := range caller.Roles {
			args := []any{"Authorization: Bearer " + keyFor[role]}
			if method != http.MethodGet && method != http.MethodDelete {
				args = append(args, "Content-Type: application/json", bytes.NewReader([]byte(`{}`)))
			}
			rec := f.api.Do(method, path, args...)
			want := slices.Contains(roles, role)
			if got := rec.Code != http.StatusForbidden; got != want {
				t.Errorf("%s %s with a %s key: %d (allowed %v): %s", method, path, role, rec.Code, want, rec.Body.String())
			}
		}
	}
}

// TestForbiddenAndUnauthorizedSayWhy: the 403 names the role needed, the
// 401 where a key comes from.
func TestForbiddenAndUnauthorizedSayWhy(t *testing.T) {
	t.Parallel()
	f := newFixtureWith(t, roleKeys())
	p := wantProblem(t, f.api.Get("/modules", "Authorization: Bearer run"), http.StatusForbidden)
	if !strings.Contains(p.Detail, "needs the role admin") || !strings.Contains(p.Detail, "runner") {
		t.Errorf("403 detail %q", p.Detail)
	}
	p = wantProblem(t, f.api.Get("/processes", "Authorization: Bearer nope"), http.StatusUnauthorized)
	if !strings.Contains(p.Detail, "api-key file") || !strings.Contains(p.Detail, "cyrnel keys create") {
		t.Errorf("401 detail %q", p.Detail)
	}
	// A key that cannot be checked (the database is away) is 503, not 401.
	down := newFixtureWith(t, &fakeKeys{authErr: errors.New("connection refused")})
	rec := down.api.Get("/processes", "Authorization: Bearer run")
	wantProblem(t, rec, http.StatusServiceUnavailable)
	if rec.Header().Get("Retry-After") == "" {
		t.Error("503 without Retry-After")
	}
	// Unknown routes need a key too.
	wantProblem(t, f.api.Get("/nothing"), http.StatusUnauthorized)
	wantProblem(t, f.api.Get("/nothing", "Authorization: Bearer run"), http.StatusNotFound)
}

// TestKeyRoutes: create (201, the key in the answer), bad input located at
// its field, list, get, revoke (204; 404 unknown; 403 for bootstrap).
func TestKeyRoutes(t *testing.T) {
	t.Parallel()
	k := roleKeys()
	f := newFixtureWith(t, k)
	adm := "Authorization: Bearer adm"
	var created map[string]any
	wantStatus(t, f.api.Post("/keys", adm, map[string]any{"name": "agent", "roles": []string{"runner"}}), http.StatusCreated, &created)
	if created["key"] != "cyk_x" || created["id"] != "key_1" || k.created.Roles[0] != caller.Runner {
		t.Errorf("created %v from %+v", created, k.created)
	}
	wantProblem(t, f.api.Post("/keys", adm, map[string]any{"name": "agent", "roles": []string{"root"}}), http.StatusUnprocessableEntity, "body.roles[0]")
	wantProblem(t, f.api.Post("/keys", adm, map[string]any{"name": "agent", "roles": []string{}}), http.StatusUnprocessableEntity, "body.roles")
	wantProblem(t, f.api.Post("/keys", adm, map[string]any{"name": "", "roles": []string{"runner"}}), http.StatusUnprocessableEntity, "body.name")
	var list struct {
		Items   []map[string]any `json:"items"`
		HasMore bool             `json:"hasMore"`
	}
	wantStatus(t, f.api.Get("/keys", adm), http.StatusOK, &list)
	if len(list.Items) != 1 || list.Items[0]["id"] != "bootstrap" || list.Items[0]["key"] != nil {
		t.Errorf("list %+v", list)
	}
	wantStatus(t, f.api.Get("/keys/bootstrap", adm), http.StatusOK, nil)
	wantProblem(t, f.api.Get("/keys/key_9", adm), http.StatusNotFound)
	wantStatus(t, f.api.Delete("/keys/key_1", adm), http.StatusNoContent, nil)
	wantProblem(t, f.api.Delete("/keys/key_9", adm), http.StatusNotFound)
	wantProblem(t, f.api.Delete("/keys/bootstrap", adm), http.StatusForbidden)
	var changes struct {
		Items []map[string]any `json:"items"`
	}
	wantStatus(t, f.api.Get("/changes", adm), http.StatusOK, &changes)
	if len(changes.Items) != 1 || changes.Items[0]["keyId"] != "bootstrap" {
		t.Errorf("changes %+v", changes)
	}
	wantProblem(t, f.api.Get("/changes?cursor=!!", adm), http.StatusUnprocessableEntity, "query.cursor")
}
