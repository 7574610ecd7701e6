package openapi

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cyrnel/cyrnel/host/egress"
)

// countingServer is a loopback upstream that counts the connections opened
// to it and the protocol of each request.
type countingServer struct {
	*httptest.Server
	conns  atomic.Int64
	mu     sync.Mutex
	protos []int // ProtoMajor of each request
}

func newCountingServer(t *testing.T, handler http.HandlerFunc, tlsHTTP2 bool) *countingServer {
	t.Helper()
	cs := &countingServer{}
	cs.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.mu.Lock()
		cs.protos = append(cs.protos, r.ProtoMajor)
		cs.mu.Unlock()
		if handler != nil {
			handler(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	cs.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			cs.conns.Add(1)
		}
	}
	if tlsHTTP2 {
		cs.EnableHTTP2 = true
		cs.StartTLS()
	} else {
		cs.Start()
	}
	t.Cleanup(cs.Close)
	return cs
}

// trust makes a's clients trust the test server's certificate (before their
// first request: the Transport reads its TLS config then).
func trust(a *Adapter, srv *httptest.Server) {
	roots := srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	for _, c := range []*http.Client{a.public, a.private} {
		c.Transport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: roots}
	}
}

// TestToolCallsKeepConnectionsAlive: sequential calls to one upstream reuse
// one connection (a broken keep-alive would open one per call).
func TestToolCallsKeepConnectionsAlive(t *testing.T) {
	t.Parallel()
	srv := newCountingServer(t, nil, false)
	def := fixture(t, "petstore-3.0.yaml")
	a := New(Options{})
	hydrate(t, a, "pets", def, map[string]any{"serverUrl": srv.URL}, nil)
	for range 20 {
		mustCall(t, a, def, "pets", "listPets", nil)
	}
	if n := srv.conns.Load(); n != 1 {
		t.Errorf("20 sequential calls opened %d connections, want 1", n)
	}
	// Teardown closes the idle connection: the next call dials anew.
	if err := a.Teardown(t.Context()); err != nil {
		t.Fatal(err)
	}
	hydrate(t, a, "pets", def, map[string]any{"serverUrl": srv.URL}, nil)
	mustCall(t, a, def, "pets", "listPets", nil)
	if n := srv.conns.Load(); n != 2 {
		t.Errorf("after Teardown: %d connections in all, want 2", n)
	}
}

// TestIdleConnectionsAreBounded: of 20 concurrent calls' connections at most
// maxIdlePerHost stay open, so 20 more concurrent calls reuse that many and
// dial the rest.
func TestIdleConnectionsAreBounded(t *testing.T) {
	t.Parallel()
	const n = 20
	var mu sync.Mutex
	release := make(chan struct{})
	arrived := make(chan struct{}, n)
	srv := newCountingServer(t, func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		wait := release
		mu.Unlock()
		arrived <- struct{}{}
		<-wait
		_, _ = io.WriteString(w, "[]")
	}, false)
	def := fixture(t, "petstore-3.0.yaml")
	a := New(Options{})
	hydrate(t, a, "pets", def, map[string]any{"serverUrl": srv.URL}, nil)
	round := func() {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if _, err := call(t, a, def, "pets", "listPets", nil); err != nil {
					t.Error(err)
				}
			})
		}
		for range n { // every call holds its own connection
			<-arrived
		}
		mu.Lock()
		close(release)
		release = make(chan struct{})
		mu.Unlock()
		wg.Wait()
	}
	round()
	if got := srv.conns.Load(); got != n {
		t.Fatalf("first round: %d connections, want %d", got, n)
	}
	round()
	if got := srv.conns.Load() - n; got != n-maxIdlePerHost {
		t.Errorf("second round dialled %d connections, want %d (%d kept idle)", got, n-maxIdlePerHost, maxIdlePerHost)
	}
}

// TestTLSToolCallsThroughTheGuard: over TLS the guard still refuses a
// private upstream without allowPrivateNetwork (no connection reaches it);
// with it, the call goes through, over HTTP/2 where the upstream offers it,
// on one kept-alive connection.
func TestTLSToolCallsThroughTheGuard(t *testing.T) {
	t.Parallel()
	srv := newCountingServer(t, nil, true)
	def := fixture(t, "petstore-3.0.yaml")
	a := New(Options{})
	trust(a, srv.Server)
	hydrate(t, a, "pets", def, map[string]any{"serverUrl": srv.URL, "allowPrivateNetwork": false}, nil)
	if _, err := call(t, a, def, "pets", "listPets", nil); !errors.Is(err, egress.ErrPrivate) {
		t.Fatalf("private upstream over TLS: %v, want the private-network refusal", err)
	}
	if n := srv.conns.Load(); n != 0 {
		t.Fatalf("the refused call opened %d connections", n)
	}
	hydrate(t, a, "pets", def, map[string]any{"serverUrl": srv.URL, "allowPrivateNetwork": true}, nil)
	for range 3 {
		if res := mustCall(t, a, def, "pets", "listPets", nil); res["status"] != 200 {
			t.Fatalf("result %v", res)
		}
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	if n := srv.conns.Load(); n != 1 || len(srv.protos) != 3 || srv.protos[0] != 2 {
		t.Errorf("%d connections, request protocols %v: want 1 connection, HTTP/2", n, srv.protos)
	}
}
