package tests

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cyrnel/cyrnel/host/pgtest"
)

// mcpAs is an MCP session with h authenticated by key.
func mcpAs(t *testing.T, h *host, key string) *mcp.ClientSession {
	t.Helper()
	as := *h
	as.key = key
	return mcpSession(t, &as)
}

// TestScaleOutMCPSession: an agent's cyrnel session lives on B and its MCP
// session is now with A (a balancer sent its new MCP session there):
// run_code naming the session through A runs on B, in the session's state,
// and end_session through A ends it. Another runner key naming the session
// through A is refused as it would be on B, and nothing runs for it.
func TestScaleOutMCPSession(t *testing.T) {
	t.Parallel()
	hs := startCluster(t, 2)
	a, b := hs[0], hs[1]
	agent, other := a.newKey("agent", "runner"), a.newKey("other", "runner")

	onB := mcpAs(t, b, agent.Key)
	ses := structured[struct {
		Session string `json:"session"`
	}](t, call(t, onB, "create_session", nil)).Session
	if r := call(t, onB, "run_code", map[string]any{"code": "x = 41", "session": ses}); r.IsError {
		t.Fatalf("x = 41 on B: %s", textOf(r))
	}

	onA := mcpAs(t, a, agent.Key)
	res := call(t, onA, "run_code", map[string]any{"code": "x += 1\nprint(x)", "session": ses})
	got := structured[runResult](t, res)
	if res.IsError || got.ExitState != "success" || got.Stdout != "42\n" {
		t.Fatalf("x += 1 through A's MCP: %s %+v", textOf(res), got)
	}
	var p, onHostA proc
	a.do("GET", fmt.Sprintf("/processes/%d", got.PID), nil, &p)
	a.do("POST", "/processes", map[string]any{"code": "1", "waitMs": 20000}, &onHostA)
	if p.HostID == "" || p.HostID == onHostA.HostID || p.Ref != "mcp" {
		t.Fatalf("the run through A's MCP ran on host %q (ref %q); A is %q", p.HostID, p.Ref, onHostA.HostID)
	}

	// Another key's MCP session through A: refused as B would refuse it.
	res = call(t, mcpAs(t, a, other.Key), "run_code", map[string]any{"code": "print(x)", "session": ses})
	if !res.IsError || !strings.Contains(textOf(res), ses) {
		t.Fatalf("another key's run in the session through A: %s", textOf(res))
	}
	var list struct {
		Items []proc `json:"items"`
	}
	b.do("GET", "/processes?ref=mcp&limit=100", nil, &list)
	if len(list.Items) != 2 {
		t.Fatalf("%d runs with ref mcp, want the agent's 2: %+v", len(list.Items), list.Items)
	}

	if r := call(t, onA, "end_session", map[string]any{"session": ses}); r.IsError {
		t.Fatalf("end_session through A: %s", textOf(r))
	}
	var seen clusterSession
	if b.do("GET", "/sessions/"+ses, nil, &seen); seen.State != "ended" || seen.EndReason != "deleted" {
		t.Fatalf("after end_session through A, on B: %+v", seen)
	}
}

// front is a TLS endpoint in front of a host (as a TLS-terminating proxy
// is): it records what each request carried and passes it on.
type front struct {
	srv    *httptest.Server
	target atomic.Pointer[url.URL]
	mu     sync.Mutex
	seen   []forwardedRequest
}

// forwardedRequest is what a request through the front carried.
type forwardedRequest struct {
	method, path, auth, by string
}

func newFront(t *testing.T) *front {
	t.Helper()
	f := &front{}
	proxy := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(f.target.Load()) }, FlushInterval: -1}
	f.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.seen = append(f.seen, forwardedRequest{r.Method, r.URL.Path, r.Header.Get("Authorization"), r.Header.Get("Cyrnel-Forwarded-By")})
		f.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// certFile writes the front's certificate where SSL_CERT_FILE can name it.
func (f *front) certFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "front.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func (f *front) requests() []forwardedRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]forwardedRequest(nil), f.seen...)
}

// TestScaleOutForwardHTTPS: B advertises an https:// address (a TLS front,
// which A trusts through SSL_CERT_FILE); a runner key's requests for B's
// session through A, REST and MCP, reach B over TLS carrying that key and
// A's mark, and B serves them as that runner. What A refuses (an unknown
// key, another key's session) is never sent on; a key revoked through A is
// refused by B too when it comes through A.
func TestScaleOutForwardHTTPS(t *testing.T) {
	t.Parallel()
	f := newFront(t)
	env := []string{
		"CYRNEL_DB_URL=" + pgtest.Schema(t, pgtest.URL(t)),
		"CYRNEL_SECRETS_KEY=" + newSecretsKey(t),
		"CYRNEL_API_KEY=" + newSecretsKey(t),
		"SSL_CERT_FILE=" + f.certFile(t),
	}
	b := start(t, "", append(env, "CYRNEL_ADVERTISE_ADDR="+f.srv.URL)...)
	bURL, err := url.Parse(b.base)
	if err != nil {
		t.Fatal(err)
	}
	f.target.Store(bURL)
	a := start(t, "", env...)
	agent, other := a.newKey("agent", "runner"), a.newKey("other", "runner")

	var ses clusterSession
	if st, body := b.as(agent.Key, "POST", "/sessions", map[string]any{}); st != http.StatusCreated {
		t.Fatalf("create on B: %d %s", st, body)
	} else {
		mustJSON(t, body, &ses)
	}
	if len(f.requests()) != 0 {
		t.Fatalf("requests reached the front before any was forwarded: %+v", f.requests())
	}

	st, body := a.as(agent.Key, "POST", "/processes", map[string]any{"code": "x = 1\nprint('over tls')", "session": ses.ID, "waitMs": 20000})
	var p proc
	mustJSON(t, body, &p)
	if st != http.StatusCreated || p.exit() != "success" || p.Stdout != "over tls\n" || p.HostID != ses.HostID {
		t.Fatalf("a run in B's session through A: %d %s", st, body)
	}
	if r := call(t, mcpAs(t, a, agent.Key), "run_code", map[string]any{"code": "print(x + 1)", "session": ses.ID}); r.IsError || structured[runResult](t, r).Stdout != "2\n" {
		t.Fatalf("run_code in B's session through A: %s", textOf(r))
	}
	seen := f.requests()
	if len(seen) != 2 {
		t.Fatalf("the front saw %d requests, want the REST run and the MCP run: %+v", len(seen), seen)
	}
	for _, r := range seen {
		if r.method != "POST" || r.path != "/processes" || r.auth != "Bearer "+agent.Key || r.by == "" {
			t.Fatalf("a forwarded request carried %+v, want the agent's key and A's mark", r)
		}
	}

	// Refused at A, so never sent on: no key, a key A does not know,
	// another runner's key (the session is not found for it).
	for key, want := range map[string]int{"": http.StatusUnauthorized, "nonsense": http.StatusUnauthorized, other.Key: http.StatusNotFound} {
		if st, body := a.as(key, "GET", "/sessions/"+ses.ID, nil); st != want {
			t.Fatalf("GET the session through A with key %q: %d %s, want %d", key, st, body, want)
		}
	}
	if n := len(f.requests()); n != 2 {
		t.Fatalf("refused requests were forwarded: %+v", f.requests()[2:])
	}

	// A key revoked through A is refused everywhere, and what A still sends
	// on for the admin is served by B.
	if st, _ := a.do("DELETE", "/keys/"+agent.ID, nil, nil); st != http.StatusNoContent {
		t.Fatalf("revoke the agent's key: %d", st)
	}
	eventually(t, "the revoked key refused by B", func() bool {
		st, _ := b.as(agent.Key, "GET", "/sessions/"+ses.ID, nil)
		return st == http.StatusUnauthorized
	})
	if st, _ := a.as(agent.Key, "GET", "/sessions/"+ses.ID, nil); st != http.StatusUnauthorized {
		t.Fatalf("the revoked key through A: %d, want 401", st)
	}
	if st, _ := a.do("DELETE", "/sessions/"+ses.ID, nil, nil); st != http.StatusNoContent {
		t.Fatalf("delete B's session through A as the admin: %d", st)
	}
	last := f.requests()[len(f.requests())-1]
	if last.method != "DELETE" || last.auth != "Bearer "+a.key {
		t.Fatalf("the admin's delete reached B as %+v", last)
	}
}

// mustJSON decodes body into v.
func mustJSON(t *testing.T, body []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(body, v); err != nil {
		t.Fatalf("%s: %v", body, err)
	}
}

// TestScaleOutSessionRightAfterStart: a session made by the first request a
// host serves is forwarded to at once: the host wrote its address before it
// served, and a renewal begun before that does not blank it.
func TestScaleOutSessionRightAfterStart(t *testing.T) {
	t.Parallel()
	hs := startCluster(t, 2, "CYRNEL_LEASE_TTL=1s")
	a, b := hs[0], hs[1]
	var ses clusterSession
	if st, _ := b.do("POST", "/sessions", map[string]any{}, &ses); st != http.StatusCreated {
		t.Fatalf("create on B: %d", st)
	}
	if p := a.run("print(1)", map[string]any{"session": ses.ID}); p.exit() != "success" || p.HostID != ses.HostID {
		t.Fatalf("a run in B's new session through A: %+v", p)
	}
}
