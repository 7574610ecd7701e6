package api

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/host/peer"
	"github.com/cyrnel/cyrnel/host/store"
)

// remoteSessions: session s1 lives on host B, s2 here (A), s3 ended on B.
type remoteSessions struct{ fakeSessions }

func (remoteSessions) Get(_ context.Context, id string) (*store.Session, error) {
	switch id {
	case "s1":
		return &store.Session{ID: id, State: "ready", HostID: "B"}, nil
	case "s2":
		return &store.Session{ID: id, State: "ready", HostID: "A"}, nil
	case "s3":
		return &store.Session{ID: id, State: "ended", HostID: "B"}, nil
	}
	return nil, errors.New("no such session")
}

type fakePeers struct{ addr string }

func (fakePeers) Self() string { return "A" }

func (p fakePeers) Address(_ context.Context, host string) (string, error) {
	if host != "B" || p.addr == "" {
		return "", store.ErrHostLost
	}
	return p.addr, nil
}

// seen is a request the other host received.
type seen struct {
	method, path, auth, by, body string
}

// forwardingAPI is host A's API, B being served by other (nil: B's address
// refuses connections).
func forwardingAPI(t *testing.T, other *httptest.Server) (http.Handler, *fakeProcesses) {
	t.Helper()
	addr := ""
	if other != nil {
		addr = strings.TrimPrefix(other.URL, "http://")
	} else {
		dead := httptest.NewServer(http.NotFoundHandler())
		addr = strings.TrimPrefix(dead.URL, "http://")
		dead.Close()
	}
	procs := &fakeProcesses{}
	h, _ := New(Deps{
		Log: slog.New(slog.DiscardHandler), Version: "test", Processes: procs, Sessions: &remoteSessions{}, Peers: fakePeers{addr},
		MCP: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }),
	})
	return h, procs
}

func send(h http.Handler, method, path, body string, header ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer k1")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestForwardSessions: requests about a session host B runs go to B with
// their method, path, body and Authorization, marked as forwarded; those
// about no session, a local or an ended one, or already forwarded, are
// served here; B unreachable is 503 with Retry-After.
func TestForwardSessions(t *testing.T) {
	t.Parallel()
	got := make(chan seen, 1)
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, r.URL.RequestURI(), r.Header.Get("Authorization"), r.Header.Get(peer.ForwardedHeader), string(b)}
		w.WriteHeader(http.StatusAccepted)
	}))
	defer other.Close()
	h, _ := forwardingAPI(t, other)

	runInS1 := `{"code": "x += 1", "session": "s1"}`
	mcpRun := `{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "run_code", "arguments": {"code": "1", "session": "s1"}}}`
	// Served here: MCP sessions live where they were opened.
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/processes", runInS1},
		{"GET", "/sessions/s1", ""},
		{"DELETE", "/sessions/s1", ""},
		{"GET", "/sessions/s1/files", ""},
		{"PUT", "/sessions/s1/files/data%2Fin.csv", "a,b"},
	} {
		rec := send(h, c.method, c.path, c.body)
		if rec.Code != http.StatusAccepted {
			t.Fatalf("%s %s: %d %s, want B's answer", c.method, c.path, rec.Code, rec.Body)
		}
		want := seen{c.method, c.path, "Bearer k1", "A", c.body}
		if s := <-got; s != want {
			t.Fatalf("%s %s: B saw %+v, want %+v", c.method, c.path, s, want)
		}
	}

	// Served here: the MCP endpoint's 418, a handler's answer otherwise.
	for _, c := range []struct {
		method, path, body string
		header             []string
	}{
		{"POST", "/processes", `{"code": "1"}`, nil},
		{"POST", "/processes", `{"code": "1", "session": "s2"}`, nil},
		{"POST", "/processes", `{"code": "1", "session": "s3"}`, nil},
		{"POST", "/processes", runInS1, []string{peer.ForwardedHeader, "C"}},
		{"GET", "/sessions/s3", "", nil},
		{"POST", "/mcp", mcpRun, nil},
	} {
		send(h, c.method, c.path, c.body, c.header...)
		select {
		case s := <-got:
			t.Fatalf("%s %s %s: forwarded (%+v), want it served here", c.method, c.path, c.body, s)
		default:
		}
	}
}

// TestForwardUnreachable: B's address refusing connections, or B without
// a live lease, answers 503 with Retry-After naming the session's host.
func TestForwardUnreachable(t *testing.T) {
	t.Parallel()
	h, _ := forwardingAPI(t, nil)
	for _, path := range []string{"/sessions/s1", "/sessions/s1/files"} {
		rec := send(h, "GET", path, "")
		if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || !strings.Contains(rec.Body.String(), "host B") {
			t.Fatalf("GET %s with B down: %d %v %s", path, rec.Code, rec.Header(), rec.Body)
		}
	}
	noLease, _ := New(Deps{Log: slog.New(slog.DiscardHandler), Version: "test", Processes: &fakeProcesses{}, Sessions: &remoteSessions{}, Peers: fakePeers{}})
	if rec := send(noLease, "DELETE", "/sessions/s1", ""); rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("DELETE with B's lease gone: %d %s", rec.Code, rec.Body)
	}
}
