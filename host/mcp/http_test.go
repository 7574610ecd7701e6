package mcp

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func serve(t *testing.T, d Deps, o Options) (*Handler, *httptest.Server) {
	t.Helper()
	d.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	h := New(d, o)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The key is the Authorization header's, as host/api would find it.
		asKey(h, strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")).ServeHTTP(w, r)
	}))
	t.Cleanup(func() { h.Close(); srv.Close() })
	return h, srv
}

type keyed struct{ key string }

func (k keyed) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+k.key)
	return http.DefaultTransport.RoundTrip(r)
}

func open(t *testing.T, url, key string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	return c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, MaxRetries: -1, HTTPClient: &http.Client{Transport: keyed{key}}}, nil)
}

func post(t *testing.T, url, key, session, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// TestSessionsAreBounded: past MaxSessions a new session is refused with a
// JSON-RPC error (503); once one ends, a new one opens (control).
func TestSessionsAreBounded(t *testing.T) {
	t.Parallel()
	_, srv := serve(t, Deps{Processes: &fakeProcesses{}, Environments: fakeEnvironments{}, Tools: &fakeTools{}}, Options{MaxSessions: 1})
	first, err := open(t, srv.URL, "k1")
	if err != nil {
		t.Fatal(err)
	}
	resp, body := post(t, srv.URL, "k1", "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	var rpc struct {
		Error struct{ Code int } `json:"error"`
	}
	if json.Unmarshal([]byte(body), &rpc); resp.StatusCode != http.StatusServiceUnavailable || rpc.Error.Code != -32603 {
		t.Fatalf("a session past the bound: %d %s", resp.StatusCode, body)
	}
	first.Close() // DELETE /mcp
	second, err := open(t, srv.URL, "k1")
	if err != nil {
		t.Fatalf("a session once the first ended: %v", err)
	}
	second.Close()
}

// TestSessionBelongsToItsKey: another key's request with a session's id is
// refused (403); the key that opened it is served (control).
func TestSessionBelongsToItsKey(t *testing.T) {
	t.Parallel()
	_, srv := serve(t, Deps{Processes: &fakeProcesses{}, Environments: fakeEnvironments{}, Tools: &fakeTools{}}, Options{})
	s, err := open(t, srv.URL, "k1")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	if resp, body := post(t, srv.URL, "k2", s.ID(), list); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("another key on the session: %d %s", resp.StatusCode, body)
	}
	if resp, body := post(t, srv.URL, "k1", s.ID(), list); resp.StatusCode != http.StatusOK || !strings.Contains(body, "run_code") {
		t.Fatalf("its own key: %d %s", resp.StatusCode, body)
	}
}

// TestCallEndsWithItsRequest: run_code's program is killed when the POST
// carrying the call is aborted, with no notifications/cancelled (the SDK
// alone would let it run); Close ends a call in flight the same way.
func TestCallEndsWithItsRequest(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"abort", "close"} {
		procs := &fakeProcesses{running: make(chan struct{}), kills: make(chan int64, 1)}
		h, srv := serve(t, Deps{Processes: procs, Environments: fakeEnvironments{}, Tools: &fakeTools{}}, Options{})
		s, err := open(t, srv.URL, "k1")
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"run_code","arguments":{"code":"sleep"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer k1")
		req.Header.Set("Mcp-Session-Id", s.ID())
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		go func() {
			if resp, err := http.DefaultClient.Do(req); err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
		<-procs.running
		if how == "abort" {
			cancel()
		} else {
			go h.Close()
		}
		select {
		case pid := <-procs.kills:
			if pid != 1 {
				t.Fatalf("%s: killed %d", how, pid)
			}
		case <-time.After(time.Second):
			t.Fatalf("%s: the run was not killed within a second", how)
		}
		cancel()
		s.Close()
	}
}
