package tests

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// designRoles is DESIGN §13's table of roles, written out here apart from
// the server's route table so that a route opened to a wrong role fails:
// runner: processes, sessions and their files, GET /tools*, tool invoke,
// GET /environment*, MCP; approver: approvals, the audit of tool calls,
// reading processes; admin: everything. Nil: no key needed.
func designRoles(method, path string) []string {
	switch {
	case path == "/health", path == "/health/ready", strings.HasPrefix(path, "/openapi"):
		return nil
	case strings.HasPrefix(path, "/processes") && method == http.MethodGet:
		return []string{"runner", "approver", "admin"}
	case strings.HasPrefix(path, "/processes"), strings.HasPrefix(path, "/sessions"), path == "/mcp",
		strings.HasPrefix(path, "/tools/") && strings.HasSuffix(path, "/invoke"),
		strings.HasPrefix(path, "/tools") && method == http.MethodGet,
		strings.HasPrefix(path, "/environment") && method == http.MethodGet:
		return []string{"runner", "admin"}
	case strings.HasPrefix(path, "/approvals"), path == "/tool-calls":
		return []string{"approver", "admin"}
	}
	return []string{"admin"}
}

// as sends a request with key (none when empty) and returns the status
// and the body.
func (h *host) as(key, method, path string, body any) (int, []byte) {
	h.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			h.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, h.base+path, r)
	if err != nil {
		h.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type createdKey struct {
	ID    string   `json:"id"`
	Name  string   `json:"name"`
	Roles []string `json:"roles"`
	Key   string   `json:"key"`
}

// newKey makes a key with roles through the API, as the bootstrap key.
func (h *host) newKey(name string, roles ...string) createdKey {
	h.t.Helper()
	var k createdKey
	if code, _ := h.do("POST", "/keys", map[string]any{"name": name, "roles": roles}, &k); code != http.StatusCreated || k.Key == "" {
		h.t.Fatalf("create key %s: %d %+v", name, code, k)
	}
	return k
}

// TestEachRoleGetsExactlyItsRoutes: every operation of the served spec and
// the MCP endpoint, with no key, a runner key, an approver key and the
// bootstrap key: 401 without a key (but for /health and the spec), 403
// exactly where DESIGN §13 does not give the key's role the route. The
// bootstrap (admin) key is the control: it is never refused, so each 403
// is the role's doing. Bodies are invalid on purpose, so nothing changes.
func TestEachRoleGetsExactlyItsRoutes(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	keys := map[string]string{"runner": h.newKey("agent", "runner").Key, "approver": h.newKey("reviewer", "approver").Key, "admin": h.key}
	var spec struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if code, _ := h.do("GET", "/openapi.json", nil, &spec); code != 200 {
		t.Fatal("no spec")
	}
	type route struct{ method, path string }
	routes := []route{{"POST", "/mcp"}, {"GET", "/mcp"}, {"DELETE", "/mcp"}}
	for path, ops := range spec.Paths {
		for method := range ops {
			routes = append(routes, route{strings.ToUpper(method), path})
		}
	}
	if len(routes) < 65 {
		t.Fatalf("only %d routes in the spec", len(routes))
	}
	fill := strings.NewReplacer("{pid}", "999999", "{id}", "nosuch", "{path}", "f.txt", "{serviceId}", "nosuch", "{toolId}", "nosuch")
	for _, r := range routes {
		path := fill.Replace(r.path)
		var body any
		if r.method != "GET" && r.method != "DELETE" {
			body = map[string]any{"notAField": true}
		}
		need := designRoles(r.method, r.path)
		if code, _ := h.as("", r.method, path, body); (need == nil) != (code != http.StatusUnauthorized) {
			t.Errorf("%s %s without a key: %d", r.method, path, code)
		}
		for role, key := range keys {
			code, b := h.as(key, r.method, path, body)
			if allowed := need == nil || slices.Contains(need, role); allowed != (code != http.StatusForbidden) {
				t.Errorf("%s %s with the %s key: %d (allowed: %v) %s", r.method, path, role, code, allowed, b)
			}
			if code == http.StatusUnauthorized || code >= 500 {
				t.Errorf("%s %s with the %s key: %d %s", r.method, path, role, code, b)
			}
		}
	}
}

// TestRevokedKeyIsRefused: a runner key works, is revoked, and is refused
// from then on; the bootstrap key, the control, still works and cannot be
// revoked through the API. Keys are listed without their secret.
func TestRevokedKeyIsRefused(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	k := h.newKey("agent", "runner")
	if code, _ := h.as(k.Key, "GET", "/processes", nil); code != 200 {
		t.Fatalf("the new key: %d", code)
	}
	var list struct {
		Items []map[string]any `json:"items"`
	}
	// lastUsedAt is written after the request, without it waiting.
	eventually(t, "lastUsedAt", func() bool {
		h.do("GET", "/keys", nil, &list)
		return len(list.Items) == 2 && list.Items[1]["lastUsedAt"] != nil
	})
	if list.Items[0]["id"] != "bootstrap" || list.Items[1]["id"] != k.ID || list.Items[1]["key"] != nil || list.Items[1]["name"] != "agent" {
		t.Fatalf("keys %+v", list.Items)
	}
	if code, _ := h.do("DELETE", "/keys/"+k.ID, nil, nil); code != http.StatusNoContent {
		t.Fatalf("revoke: %d", code)
	}
	code, b := h.as(k.Key, "GET", "/processes", nil)
	if code != http.StatusUnauthorized || !strings.Contains(string(b), "api-key") {
		t.Fatalf("a revoked key: %d %s", code, b)
	}
	if code, _ := h.as(h.key, "GET", "/processes", nil); code != 200 {
		t.Fatalf("the bootstrap key after a revocation: %d", code)
	}
	if code, _ := h.do("DELETE", "/keys/"+k.ID, nil, nil); code != http.StatusNotFound {
		t.Fatalf("revoke twice: %d", code)
	}
	if code, _ := h.do("DELETE", "/keys/bootstrap", nil, nil); code != http.StatusForbidden {
		t.Fatalf("revoke the bootstrap key: %d", code)
	}
	var p problem
	if code, _ := h.do("POST", "/keys", map[string]any{"name": "x", "roles": []string{"root"}}, &p); code != 422 || len(p.Errors) != 1 || p.Errors[0].Location != "body.roles[0]" {
		t.Fatalf("an unknown role: %d %+v", code, p)
	}
	if code, _ := h.do("POST", "/keys", map[string]any{"name": "x", "roles": []string{"runner"}, "expiresAt": time.Now().Add(-time.Hour)}, &p); code != 422 || p.Errors[0].Location != "body.expiresAt" {
		t.Fatalf("an expiry in the past: %d %+v", code, p)
	}
}

// TestDatabaseNeverHoldsTheKey: the database files hold a new key's name
// (the control: the search would find what is there) but never the key.
func TestDatabaseNeverHoldsTheKey(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := start(t, dir)
	k := h.newKey("agent-findable-name", "runner")
	h.stop()
	var all []byte
	for _, name := range []string{"cyrnel.db", "cyrnel.db-wal"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		all = append(all, b...)
	}
	if !bytes.Contains(all, []byte("agent-findable-name")) {
		t.Fatal("the key's name is not in the database files: the search looks in the wrong place")
	}
	secret := strings.TrimPrefix(k.Key, "cyk_")
	if bytes.Contains(all, []byte(secret)) || bytes.Contains(all, []byte(secret[:16])) {
		t.Fatal("the database holds the key itself")
	}
}

// TestChangesRecordWhoChangedWhat: configuration changes made with two
// admin keys are listed newest first with the key that made each; a
// secret's value never appears, its name does.
func TestChangesRecordWhoChangedWhat(t *testing.T) {
	t.Parallel()
	h, _ := governed(t, "")
	other := h.newKey("second admin", "admin")
	if code, b := h.as(other.Key, "PUT", "/tool-policies", map[string]any{"default": "allow", "rules": []any{map[string]any{"pattern": "x.*", "decision": "block"}}}); code != 200 {
		t.Fatalf("policies: %d %s", code, b)
	}
	if code, _ := h.do("PATCH", "/modules/typescript", map[string]any{"enabled": false}, nil); code != 200 {
		t.Fatalf("disable typescript: %d", code)
	}
	var changes struct {
		Items []struct {
			ID     int64          `json:"id"`
			KeyID  string         `json:"keyId"`
			Action string         `json:"action"`
			Target string         `json:"target"`
			Detail map[string]any `json:"detail"`
		} `json:"items"`
		HasMore    bool    `json:"hasMore"`
		NextCursor *string `json:"nextCursor"`
	}
	h.do("GET", "/changes?limit=100", nil, &changes)
	var got []string
	for _, c := range changes.Items {
		got = append(got, c.KeyID+" "+c.Action+" "+c.Target)
	}
	want := []string{"bootstrap module.disable typescript", other.ID + " policies.set tool-policies", "bootstrap key.create " + other.ID}
	if len(got) < 3 || !slices.Equal(got[:3], want) {
		t.Fatalf("changes %q, want %q first", got, want)
	}
	// Secrets by name only.
	if code, b := h.do("PUT", "/services/petstore/secrets", map[string]any{"api_key": "the-secret-value-42"}, nil); code != 200 {
		t.Fatalf("secrets: %d %v", code, b)
	}
	var raw string
	h.do("GET", "/changes?limit=1", nil, &raw)
	if !strings.Contains(raw, `"service.secrets"`) || !strings.Contains(raw, "api_key") {
		t.Fatalf("secrets change: %s", raw)
	}
	h.do("GET", "/changes?limit=100", nil, &raw)
	if strings.Contains(raw, "the-secret-value-42") || strings.Contains(raw, serviceSecret) || !strings.Contains(raw, `"service.create"`) {
		t.Fatalf("a secret's value in the changes: %s", raw)
	}
	var page struct {
		Items      []map[string]any `json:"items"`
		NextCursor *string          `json:"nextCursor"`
	}
	h.do("GET", "/changes?limit=1", nil, &page)
	if page.NextCursor == nil {
		t.Fatal("no next page")
	}
	h.do("GET", "/changes?limit=1&cursor="+*page.NextCursor, nil, &page)
	if len(page.Items) != 1 || page.Items[0]["action"] != "module.disable" || page.Items[0]["keyId"] != "bootstrap" {
		t.Fatalf("second page %+v", page.Items)
	}
}

// TestMCPNeedsTheRunnerRole: an approver key is refused at /mcp (403)
// where a runner key, the control, opens a session and runs code.
func TestMCPNeedsTheRunnerRole(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	init := map[string]any{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": map[string]any{
		"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "t", "version": "1"}}}
	post := func(key string) int {
		b, _ := json.Marshal(init)
		req, _ := http.NewRequest("POST", h.base+"/mcp", bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(h.newKey("reviewer", "approver").Key); code != http.StatusForbidden {
		t.Errorf("MCP with an approver key: %d, want 403", code)
	}
	runner := h.newKey("agent", "runner")
	if code := post(runner.Key); code != http.StatusOK {
		t.Errorf("MCP initialize with a runner key: %d, want 200", code)
	}
	agent := *h
	agent.key = runner.Key
	s := mcpSession(t, &agent)
	if r := call(t, s, "run_code", map[string]any{"code": "print(6*7)"}); !strings.Contains(textOf(r), "42") {
		t.Fatalf("run_code with a runner key: %s", textOf(r))
	}
}

// TestCLIKeys: keys create prints the key alone on stdout, list shows it
// (not its secret), the new runner key may not list keys (403), revoke
// ends it.
func TestCLIKeys(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	dir := t.TempDir()
	srv := []string{"--server", h.base}
	admin := []string{"CYRNEL_API_KEY=" + h.key}
	r := cli(t, dir, "", admin, append([]string{"keys", "create", "--name", "agent", "--role", "runner", "--expires", "720h"}, srv...)...)
	key := strings.TrimSpace(r.stdout)
	if r.code != 0 || !strings.HasPrefix(key, "cyk_") || strings.Count(r.stdout, "\n") != 1 || !strings.Contains(r.stderr, "roles: runner") {
		t.Fatalf("keys create: %+v", r)
	}
	if code, _ := h.as(key, "GET", "/processes", nil); code != 200 {
		t.Fatalf("the CLI's key: %d", code)
	}
	r = cli(t, dir, "", admin, append([]string{"keys", "list"}, srv...)...)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if r.code != 0 || len(lines) != 3 || !strings.HasPrefix(lines[1], "bootstrap") || !strings.Contains(lines[2], "agent") || strings.Contains(r.stdout, key) {
		t.Fatalf("keys list: %+v", r)
	}
	id := strings.Fields(lines[2])[0]
	if r = cli(t, dir, "", []string{"CYRNEL_API_KEY=" + key}, append([]string{"keys", "list"}, srv...)...); r.code != 1 || !strings.Contains(r.stderr, "403") {
		t.Fatalf("keys list with a runner key: %+v", r)
	}
	if r = cli(t, dir, "", admin, append([]string{"keys", "revoke", id}, srv...)...); r.code != 0 {
		t.Fatalf("keys revoke: %+v", r)
	}
	if code, _ := h.as(key, "GET", "/processes", nil); code != http.StatusUnauthorized {
		t.Fatalf("the revoked key: %d", code)
	}
	for _, args := range [][]string{{"keys"}, {"keys", "create", "--role", "runner"}, {"keys", "create", "--name", "x"}, {"keys", "revoke"}} {
		if r = cli(t, dir, "", admin, append(args, srv...)...); r.code == 0 {
			t.Fatalf("%v: want an error: %+v", args, r)
		}
	}
	if r = cli(t, dir, "", nil, "keys", "--help"); r.code != 0 || !strings.Contains(r.stdout, "runner") {
		t.Fatalf("keys --help: %+v", r)
	}
}

// TestRevokedOnEveryHost: two hosts on one PostgreSQL; a runner key made
// on the first works on the second (which caches it), is revoked on the
// first, and the second refuses it within a second. The bootstrap key on
// the second host is the control.
func TestRevokedOnEveryHost(t *testing.T) {
	t.Parallel()
	hs := startCluster(t, 2)
	a, b := hs[0], hs[1]
	k := a.newKey("agent", "runner")
	if code, _ := b.as(k.Key, "GET", "/processes", nil); code != 200 {
		t.Fatalf("the key on the other host: %d", code)
	}
	if code, _ := a.do("DELETE", "/keys/"+k.ID, nil, nil); code != http.StatusNoContent {
		t.Fatalf("revoke: %d", code)
	}
	revoked := time.Now()
	for {
		code, _ := b.as(k.Key, "GET", "/processes", nil)
		if code == http.StatusUnauthorized {
			break
		}
		if code != 200 || time.Since(revoked) > time.Second {
			t.Fatalf("the other host answers %d %v after the revocation", code, time.Since(revoked))
		}
		time.Sleep(20 * time.Millisecond) // polling the condition, bounded above
	}
	if code, _ := b.as(b.key, "GET", "/processes", nil); code != 200 {
		t.Fatalf("the bootstrap key on the other host: %d", code)
	}
}
