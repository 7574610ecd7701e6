package h1

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// server is a loopback API that counts the connections it accepted.
type server struct {
	*httptest.Server
	mu     sync.Mutex
	conns  int
	closed chan struct{} // a connection closed
}

func newServer(t *testing.T, h http.HandlerFunc, useTLS bool) *server {
	t.Helper()
	s := &server{closed: make(chan struct{}, 64)}
	s.Server = httptest.NewUnstartedServer(h)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		switch st {
		case http.StateNew:
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
		case http.StateClosed:
			s.closed <- struct{}{}
		}
	}
	if useTLS {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

func (s *server) accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}

func get(t *testing.T, c *http.Client, url string) (*http.Response, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(b)
}

func idle(tr *Transport) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.nIdle
}

func TestKeepsConnectionsAlive(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/chunked" {
			w.Write([]byte("part one, "))
			w.(http.Flusher).Flush()
			w.Write([]byte("part two"))
			return
		}
		io.WriteString(w, r.Method+" "+r.URL.RequestURI())
	}, false)
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for i := range 5 {
		if _, body := get(t, c, s.URL+"/pets?limit=2"); body != "GET /pets?limit=2" {
			t.Fatalf("call %d: %q", i, body)
		}
	}
	if _, body := get(t, c, s.URL+"/chunked"); body != "part one, part two" {
		t.Fatalf("chunked: %q", body)
	}
	resp, err := c.Post(s.URL+"/pets", "application/json", strings.NewReader(`{"name":"rex"}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	resp, err = c.Head(s.URL + "/pets")
	if err != nil || resp.StatusCode != 200 {
		t.Fatal(resp, err)
	}
	resp.Body.Close()
	if n := s.accepted(); n != 1 {
		t.Fatalf("%d connections for 8 sequential requests, want 1", n)
	}
}

// A body closed before its end leaves the rest on the connection: it must
// not carry the next request. Neither may one either side says to close.
func TestConnectionsNotReusable(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/close" {
			w.Header().Set("Connection", "close")
		}
		w.Write(bytes.Repeat([]byte("x"), 1<<16))
	}, false)
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	resp, err := c.Get(s.URL + "/big")
	if err != nil {
		t.Fatal(err)
	}
	io.CopyN(io.Discard, resp.Body, 10)
	resp.Body.Close()
	if n := idle(tr); n != 0 {
		t.Fatalf("%d idle after a body closed unread", n)
	}
	if _, body := get(t, c, s.URL+"/big"); len(body) != 1<<16 {
		t.Fatalf("after an unread body: %d bytes", len(body))
	}
	get(t, c, s.URL+"/close")
	if n := idle(tr); n != 0 {
		t.Fatalf("%d idle after the server said close", n)
	}
	get(t, c, s.URL+"/big")
	req, _ := http.NewRequest("GET", s.URL+"/big", nil)
	req.Close = true
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if n := idle(tr); n != 0 {
		t.Fatalf("%d idle after the request said close", n)
	}
	get(t, c, s.URL+"/big")
	// 1: the first; 2: after the unread body; 3: after the server's close;
	// 4: after the request's close.
	if n := s.accepted(); n != 4 {
		t.Fatalf("%d connections, want 4", n)
	}
}

// The server closes a kept-alive connection while it is idle: the next
// request goes out on a new one and succeeds, a POST included.
func TestServerClosedIdleConnection(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	}, false)
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for i, body := range []string{"one", "two"} {
		resp, err := c.Post(s.URL, "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(got) != body {
			t.Fatalf("%q, want %q", got, body)
		}
		if i == 0 {
			s.CloseClientConnections()
			<-s.closed
		}
	}
	if n := s.accepted(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestGzipUnpacked(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Accept-Encoding") != "gzip" {
			http.Error(w, "no gzip asked", 400)
			return
		}
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		zw.Write([]byte(`{"packed":true}`))
		zw.Close()
	}, false)
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for range 2 {
		resp, body := get(t, c, s.URL)
		if body != `{"packed":true}` || !resp.Uncompressed || resp.Header.Get("Content-Encoding") != "" {
			t.Fatalf("%d %q %v %v", resp.StatusCode, body, resp.Uncompressed, resp.Header)
		}
	}
	if n := s.accepted(); n != 1 {
		t.Fatalf("%d connections, want 1: a gzip body read to its end gives its connection back", n)
	}
	// A caller's own Accept-Encoding gets the body as it came.
	req, _ := http.NewRequest("GET", s.URL, nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != "gzip" || resp.Uncompressed {
		t.Fatalf("the caller's gzip was unpacked: %v", resp.Header)
	}
	if req.Header.Get("Accept-Encoding") != "gzip" || len(req.Header) != 1 {
		t.Fatalf("the request was changed: %v", req.Header)
	}
}

func TestTLS(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto)
	}, true)
	roots := x509.NewCertPool()
	roots.AddCert(s.Certificate())
	tr := &Transport{TLSConfig: &tls.Config{RootCAs: roots}}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	for range 3 {
		if _, body := get(t, c, s.URL); body != "HTTP/1.1" {
			t.Fatalf("%q", body)
		}
	}
	if n := s.accepted(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
	// Without the test CA the certificate is refused.
	if _, err := (&http.Client{Transport: &Transport{}}).Get(s.URL); err == nil {
		t.Fatal("an unknown certificate was accepted")
	}
}

// A canceled context ends an exchange waiting for its answer, and one
// reading its body; neither connection is kept.
func TestContextEndsTheExchange(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body" {
			w.Write([]byte("start"))
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}, false)
	defer close(release)
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/head", nil)
	done := make(chan error, 1)
	go func() {
		_, err := c.Do(req)
		done <- err
	}()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("waiting for the head: %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, "GET", s.URL+"/body", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.ReadAll(resp.Body); !errors.Is(err, context.Canceled) {
		t.Fatalf("reading the body: %v, want context.Canceled", err)
	}
	resp.Body.Close()
	if n := idle(tr); n != 0 {
		t.Fatalf("%d idle connections after two canceled exchanges", n)
	}
}

func TestIdleBounds(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 8)
	release := make(chan struct{})
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			started <- struct{}{}
			<-release
		}
	}, false)
	tr := &Transport{MaxIdlePerHost: 2, IdleTimeout: 10 * time.Millisecond}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { get(t, c, s.URL+"/wait") })
	}
	for range 4 {
		<-started // four exchanges at once: four connections
	}
	close(release)
	wg.Wait()
	if n := idle(tr); n != 2 {
		t.Fatalf("%d idle, want MaxIdlePerHost (2)", n)
	}
	// Two closed for the bound, then the two kept, by the idle timeout.
	for range 4 {
		<-s.closed
	}
	if n := idle(tr); n != 0 {
		t.Fatalf("%d idle after the idle timeout", n)
	}
	tr.mu.Lock()
	hosts := len(tr.idle)
	tr.mu.Unlock()
	if hosts != 0 {
		t.Fatalf("%d hosts still listed with no idle connection", hosts)
	}
}

// A response head past MaxResponseHeaderBytes fails the exchange instead of
// growing the host's memory with it.
func TestHeadersBounded(t *testing.T) {
	t.Parallel()
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Big", strings.Repeat("x", 256<<10))
	}, false)
	c := &http.Client{Transport: &Transport{MaxResponseHeaderBytes: 64 << 10}}
	if _, err := c.Get(s.URL); !errors.Is(err, errHeadTooLarge) {
		t.Fatalf("a 256 KiB header under a 64 KiB bound: %v", err)
	}
	c = &http.Client{Transport: &Transport{}}
	if resp, _ := get(t, c, s.URL); len(resp.Header.Get("X-Big")) != 256<<10 {
		t.Fatal("the header under the default bound did not arrive whole")
	}
}

// Nothing is sent for a call whose context has ended, nor for a header net/http
// would refuse to put on the wire.
func TestRefusedBeforeSending(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	served := 0
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served++
		mu.Unlock()
	}, false)
	tr := &Transport{}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr}
	get(t, c, s.URL) // a pooled connection to send on
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", s.URL, strings.NewReader("x"))
	if _, err := c.Do(req); !errors.Is(err, context.Canceled) {
		t.Fatalf("ended context: %v", err)
	}
	req, _ = http.NewRequest("GET", s.URL, nil)
	req.Header.Set("X-Key", "a\x00b")
	if _, err := c.Do(req); err == nil || !strings.Contains(err.Error(), "invalid header field value") {
		t.Fatalf("NUL in a header: %v", err)
	}
	get(t, c, s.URL)
	mu.Lock()
	defer mu.Unlock()
	if served != 2 {
		t.Fatalf("the server saw %d requests, want 2 (the refused ones sent nothing)", served)
	}
}

func TestRefusesOtherSchemes(t *testing.T) {
	t.Parallel()
	body := &closeRecorder{Reader: strings.NewReader("x")}
	req, _ := http.NewRequest("POST", "ftp://example.com/x", body)
	if _, err := (&Transport{}).RoundTrip(req); err == nil || !body.closed {
		t.Fatalf("err %v, body closed %v", err, body.closed)
	}
}

type closeRecorder struct {
	io.Reader
	closed bool
}

func (c *closeRecorder) Close() error { c.closed = true; return nil }
