package tests

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestEveryChangeNamesItsKey (issue 22, item 2: "every configuration change
// records which key did it"): each route of the served spec that changes
// configuration (every admin-only route but a read) is used once with a
// second admin key, and the newest entry of GET /changes is then that
// key's, with the route's action and target. A route the spec gains
// without a case here fails the test. The control: a refused change (its
// body invalid) and a read record nothing, so each entry is the change's.
func TestEveryChangeNamesItsKey(t *testing.T) {
	t.Parallel()
	h, _ := governed(t, "")
	other := h.newKey("second admin", "admin")
	as := h.withKey(other.Key)
	revokable := h.newKey("to revoke", "runner")
	pets := map[string]any{"id": "pets", "adapter": "openapi", "source": map[string]any{"content": fixture(t, "swagger-petstore-3.0.yaml")}}
	cases := []changeCase{
		{"PATCH", "/tools/petstore/getPetById", map[string]any{"enabled": false}, "tool.disable", "petstore.getPetById"},
		{"PUT", "/tool-policies", map[string]any{"default": "allow", "rules": []any{}}, "policies.set", "tool-policies"},
		{"PUT", "/environment", map[string]any{"module": "typescript"}, "environment.switch", "typescript"},
		{"PUT", "/environment", map[string]any{"module": "python"}, "environment.switch", "python"},
		{"PATCH", "/modules/typescript", map[string]any{"enabled": false}, "module.disable", "typescript"},
		{"PUT", "/modules/typescript/config", map[string]any{"concurrency": 2}, "module.config", "typescript"},
		{"PUT", "/modules/python/secrets", map[string]any{}, "module.secrets", "python"},
		{"POST", "/services", pets, "service.create", "pets"},
		{"PATCH", "/services/pets", map[string]any{"enabled": false}, "service.disable", "pets"},
		{"PUT", "/services/pets/config", map[string]any{"serverUrl": "https://pets.example/v1"}, "service.config", "pets"},
		{"PUT", "/services/pets/secrets", map[string]any{"api_key": "k"}, "service.secrets", "pets"},
		{"POST", "/services/pets/refresh", nil, "service.refresh", "pets"},
		{"DELETE", "/services/pets", nil, "service.delete", "pets"},
		{"POST", "/keys", map[string]any{"name": "made", "roles": []string{"runner"}}, "key.create", ""},
		{"DELETE", "/keys/" + revokable.ID, nil, "key.revoke", revokable.ID},
	}
	type change struct {
		ID     int64  `json:"id"`
		KeyID  string `json:"keyId"`
		Action string `json:"action"`
		Target string `json:"target"`
	}
	newest := func() change {
		var list struct{ Items []change }
		if st, _ := h.do("GET", "/changes?limit=1", nil, &list); st != http.StatusOK || len(list.Items) != 1 {
			t.Fatalf("GET /changes: %d %+v", st, list)
		}
		return list.Items[0]
	}

	// Every route that changes configuration has its case.
	var spec struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	h.do("GET", "/openapi.json", nil, &spec)
	for path, ops := range spec.Paths {
		for method := range ops {
			method = strings.ToUpper(method)
			if method == "GET" || !slices.Equal(designRoles(method, path), []string{"admin"}) {
				continue
			}
			if !slices.ContainsFunc(cases, func(c changeCase) bool {
				return c.method == method && specPath(c.path, path)
			}) {
				t.Errorf("%s %s changes configuration and has no case here", method, path)
			}
		}
	}

	// Control: a refused change and a read leave no entry.
	before := newest()
	if st, _ := as.do("PUT", "/tool-policies", map[string]any{"default": "maybe"}, nil); st != http.StatusUnprocessableEntity {
		t.Fatalf("control: an invalid policy: %d", st)
	}
	as.do("GET", "/modules", nil, nil)
	if got := newest(); got != before {
		t.Fatalf("control: a refused change or a read was recorded: %+v (before: %+v)", got, before)
	}

	for _, c := range cases {
		st, b := h.as(other.Key, c.method, c.path, c.body)
		if st >= 300 {
			t.Fatalf("%s %s: %d %s", c.method, c.path, st, b)
		}
		got := newest()
		target := c.target
		if c.action == "key.create" {
			var k createdKey
			json.Unmarshal(b, &k)
			target = k.ID
		}
		if got.ID <= before.ID || got.KeyID != other.ID || got.Action != c.action || got.Target != target {
			t.Errorf("%s %s: the newest change is %+v, want %s by %s on %s", c.method, c.path, got, c.action, other.ID, target)
		}
		before = got
	}
}

// changeCase is a request that changes configuration and the entry of
// GET /changes it makes.
type changeCase struct {
	method, path   string
	body           any
	action, target string
}

// specPath reports whether path fills the spec's route pattern.
func specPath(path, pattern string) bool {
	p, q := strings.Split(path, "/"), strings.Split(pattern, "/")
	if len(p) != len(q) {
		return false
	}
	for i := range q {
		if !strings.HasPrefix(q[i], "{") && q[i] != p[i] {
			return false
		}
	}
	return true
}
