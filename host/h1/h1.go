// Package h1 is an HTTP/1.1 client transport that makes each exchange on
// the calling goroutine: it writes the request and reads the response
// itself, with net/http's own writer and parser, over connections it keeps
// alive.
//
// net/http's Transport hands every exchange to two goroutines of the
// connection (one writes, one reads) and back. After any idle, each hand-off
// wakes a parked thread, which costs a call from a program through the host
// about 40 µs on a two-core machine, a third of a tool call's whole cost
// (docs/benchmarks.md). Tool calls are short request/response exchanges,
// so doing them in place costs nothing in function: it speaks HTTP/1.1
// (also over TLS), knows no proxies, and asks for gzip and unpacks it as
// net/http does.
package h1

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/sys/unix"
)

// Defaults of the Transport's bounds.
const (
	DefaultMaxIdlePerHost         = 16
	DefaultMaxIdle                = 100
	DefaultIdleTimeout            = 90 * time.Second
	DefaultMaxResponseHeaderBytes = 10 << 20 // net/http's
)

// Transport is an http.RoundTripper. The zero value dials with a plain
// net.Dialer; it is safe for concurrent use.
type Transport struct {
	// DialContext opens connections (default: a net.Dialer's).
	DialContext func(ctx context.Context, network, addr string) (net.Conn, error)
	// TLSConfig is cloned for each https connection, its ServerName set to
	// the request's host.
	TLSConfig *tls.Config
	// MaxIdlePerHost and MaxIdle bound the connections kept alive, per host
	// and in all; IdleTimeout closes one left idle that long.
	MaxIdlePerHost int
	MaxIdle        int
	IdleTimeout    time.Duration
	// MaxResponseHeaderBytes bounds a response's head (status line and
	// headers): an upstream, or any redirect target, could otherwise grow
	// the host's memory without end.
	MaxResponseHeaderBytes int64

	mu    sync.Mutex
	idle  map[string][]*conn // by scheme://host:port, the most recent last
	nIdle int
}

var _ http.RoundTripper = (*Transport)(nil)

// conn is one connection; it belongs to one exchange at a time, or to the
// idle pool.
type conn struct {
	t      *Transport
	key    string
	nc     net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	count  *counter
	reused bool
	timer  *time.Timer // closes it after IdleTimeout in the pool
}

// counter counts what crossed the connection during one exchange (a
// failure before anything was written or read can be retried) and bounds
// what is read while limit >= 0.
type counter struct {
	net.Conn
	read, written int64
	limit         int64
}

// errHeadTooLarge ends an exchange whose response head passed the bound.
var errHeadTooLarge = errors.New("h1: response headers too large")

func (c *counter) Read(p []byte) (int, error) {
	if c.limit == 0 {
		return 0, errHeadTooLarge
	}
	if c.limit > 0 && int64(len(p)) > c.limit {
		p = p[:c.limit]
	}
	n, err := c.Conn.Read(p)
	c.read += int64(n)
	if c.limit > 0 {
		c.limit -= int64(n)
	}
	return n, err
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written += int64(n)
	return n, err
}

// RoundTrip makes one exchange. Like any RoundTripper it leaves req as it
// is and closes its body.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || (req.URL.Scheme != "http" && req.URL.Scheme != "https") || req.URL.Host == "" {
		closeBody(req)
		return nil, fmt.Errorf("h1: unsupported URL %q", req.URL)
	}
	if err := validRequest(req); err != nil {
		closeBody(req)
		return nil, err
	}
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		// A call whose execution ended sends nothing more.
		if err := ctx.Err(); err != nil {
			closeBody(req)
			return nil, err
		}
		// A retry takes a new connection: the pool's others may be as
		// stale as the one that failed.
		c, err := t.get(ctx, req, attempt > 0)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		resp, err := c.exchange(ctx, req)
		if err == nil {
			return resp, nil
		}
		c.nc.Close()
		// A kept-alive connection the server closed while it was idle:
		// try once more on a new one, if the request may be sent again.
		if attempt > 0 || !c.reused || ctx.Err() != nil || !retryable(req, c.count) {
			return nil, err
		}
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			r := *req
			r.Body = body
			req = &r
		}
	}
}

// validRequest refuses what net/http's Transport refuses: a method that is
// no token, or a header name or value that is not valid on the wire
// (Request.Write would send control bytes as they are).
func validRequest(req *http.Request) error {
	if req.Method != "" && strings.IndexFunc(req.Method, func(r rune) bool { return !httpguts.IsTokenRune(r) }) >= 0 {
		return fmt.Errorf("h1: invalid method %q", req.Method)
	}
	for k, vv := range req.Header {
		if !httpguts.ValidHeaderFieldName(k) {
			return fmt.Errorf("h1: invalid header field name %q", k)
		}
		for _, v := range vv {
			if !httpguts.ValidHeaderFieldValue(v) {
				return fmt.Errorf("h1: invalid header field value for %q", k)
			}
		}
	}
	return nil
}

// retryable: nothing of the request left, or nothing of an answer came to
// a request that may be repeated; either way the body can be sent again.
func retryable(req *http.Request, c *counter) bool {
	if req.Body != nil && req.Body != http.NoBody && req.GetBody == nil {
		return false
	}
	if c.written == 0 {
		return true
	}
	if c.read > 0 {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	return req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// aLongTimeAgo, as a deadline, ends any I/O in progress at once.
var aLongTimeAgo = time.Unix(1, 0)

// exchange writes req and reads the response's head; the body is read by
// the caller, and its Close gives the connection back (or closes it).
func (c *conn) exchange(ctx context.Context, req *http.Request) (*http.Response, error) {
	c.count.read, c.count.written = 0, 0
	stop := context.AfterFunc(ctx, func() { c.nc.SetDeadline(aLongTimeAgo) })
	fail := func(err error) (*http.Response, error) {
		if !stop() {
			err = ctx.Err()
		}
		return nil, err
	}
	w, gzipped := req, false
	if req.Header.Get("Accept-Encoding") == "" && req.Header.Get("Range") == "" && req.Method != http.MethodHead {
		r := *req
		r.Header = req.Header.Clone()
		if r.Header == nil {
			r.Header = http.Header{}
		}
		r.Header.Set("Accept-Encoding", "gzip")
		w, gzipped = &r, true
	}
	err := w.Write(c.bw)
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		return fail(fmt.Errorf("h1: write request: %w", err))
	}
	var resp *http.Response
	for informational := 0; ; informational++ {
		c.count.limit = c.t.maxHead()
		resp, err = http.ReadResponse(c.br, req)
		c.count.limit = -1
		if err != nil {
			return fail(fmt.Errorf("h1: read response: %w", err))
		}
		// 1xx heads (never 101: nothing here asks to switch protocols)
		// precede the real one.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols || informational == 5 {
			break
		}
	}
	if resp.StatusCode < 200 {
		resp.Body.Close()
		return fail(fmt.Errorf("h1: unexpected status %s", resp.Status))
	}
	reusable := !resp.Close && !req.Close
	if resp.Body == http.NoBody {
		if stop() && reusable {
			c.t.put(c)
		} else {
			c.nc.Close()
		}
		return resp, nil
	}
	b := &body{ctx: ctx, c: c, rc: resp.Body, stop: stop, reusable: reusable}
	resp.Body = b
	if gzipped && strings.EqualFold(resp.Header.Get("Content-Encoding"), "gzip") {
		resp.Body = &gunzip{body: b}
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
		resp.Uncompressed = true
	}
	return resp, nil
}

// body is a response body; reading it to its end and closing it gives the
// connection back.
type body struct {
	ctx      context.Context
	c        *conn
	rc       io.ReadCloser
	stop     func() bool
	reusable bool
	eof      bool
	closed   bool
}

func (b *body) Read(p []byte) (int, error) {
	if b.closed {
		return 0, http.ErrBodyReadAfterClose
	}
	n, err := b.rc.Read(p)
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil && b.ctx.Err() != nil:
		err = b.ctx.Err() // the deadline that ended the read was the context's
	}
	return n, err
}

func (b *body) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	// Read to its end, the connection is ready for the next request;
	// otherwise what is left of the body would be the next answer.
	if b.stop() && b.eof && b.reusable {
		b.c.t.put(b.c)
	} else {
		b.c.nc.Close()
	}
	return nil
}

// gunzip unpacks a gzip body on first read.
type gunzip struct {
	body *body
	zr   *gzip.Reader
	err  error
}

func (g *gunzip) Read(p []byte) (int, error) {
	if g.zr == nil && g.err == nil {
		g.zr, g.err = gzip.NewReader(g.body)
	}
	if g.err != nil {
		return 0, g.err
	}
	return g.zr.Read(p)
}

func (g *gunzip) Close() error { return g.body.Close() }

func (t *Transport) maxHead() int64 {
	if t.MaxResponseHeaderBytes > 0 {
		return t.MaxResponseHeaderBytes
	}
	return DefaultMaxResponseHeaderBytes
}

// get takes a live idle connection for req's host, or dials one (fresh:
// always).
func (t *Transport) get(ctx context.Context, req *http.Request, fresh bool) (*conn, error) {
	key, addr := poolKey(req)
	for !fresh {
		t.mu.Lock()
		list := t.idle[key]
		if len(list) == 0 {
			t.mu.Unlock()
			break
		}
		c := list[len(list)-1]
		list[len(list)-1] = nil
		t.setIdle(key, list[:len(list)-1])
		t.nIdle--
		t.mu.Unlock()
		c.timer.Stop()
		if c.alive() {
			c.reused = true
			return c, nil
		}
		c.nc.Close()
	}
	dial := t.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	nc, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if req.URL.Scheme == "https" {
		cfg := &tls.Config{}
		if t.TLSConfig != nil {
			cfg = t.TLSConfig.Clone()
		}
		if cfg.ServerName == "" {
			cfg.ServerName = req.URL.Hostname()
		}
		cfg.NextProtos = []string{"http/1.1"}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, fmt.Errorf("h1: TLS handshake with %s: %w", addr, err)
		}
		nc = tc
	}
	count := &counter{Conn: nc, limit: -1}
	return &conn{t: t, key: key, nc: nc, count: count, br: bufio.NewReader(count), bw: bufio.NewWriter(count)}, nil
}

// poolKey names a connection's destination; addr is what is dialled.
func poolKey(req *http.Request) (key, addr string) {
	addr = req.URL.Host
	if req.URL.Port() == "" {
		port := "80"
		if req.URL.Scheme == "https" {
			port = "443"
		}
		addr = net.JoinHostPort(req.URL.Hostname(), port)
	}
	return req.URL.Scheme + "://" + addr, addr
}

// alive says whether an idle connection can carry a request: nothing is
// waiting to be read on it, neither data nor the server's close. Asked of
// the socket itself without blocking, since no goroutine watches an idle
// connection.
func (c *conn) alive() bool {
	if c.br.Buffered() > 0 {
		return false
	}
	nc := c.nc
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var peekErr error
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, peekErr = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		return true
	})
	return err == nil && errors.Is(peekErr, unix.EAGAIN)
}

// put keeps c for the next request to its host, or closes it when the pool
// is full.
func (t *Transport) put(c *conn) {
	if err := c.nc.SetDeadline(time.Time{}); err != nil {
		c.nc.Close()
		return
	}
	t.mu.Lock()
	if t.idle == nil {
		t.idle = map[string][]*conn{}
	}
	if len(t.idle[c.key]) >= or(t.MaxIdlePerHost, DefaultMaxIdlePerHost) || t.nIdle >= or(t.MaxIdle, DefaultMaxIdle) {
		t.mu.Unlock()
		c.nc.Close()
		return
	}
	t.idle[c.key] = append(t.idle[c.key], c)
	t.nIdle++
	timeout := t.IdleTimeout
	if timeout <= 0 {
		timeout = DefaultIdleTimeout
	}
	if c.timer == nil {
		c.timer = time.AfterFunc(timeout, func() { t.drop(c) })
	} else {
		c.timer.Reset(timeout)
	}
	t.mu.Unlock()
}

// drop closes c if it is still idle.
func (t *Transport) drop(c *conn) {
	t.mu.Lock()
	list := t.idle[c.key]
	for i, x := range list {
		if x == c {
			t.setIdle(c.key, append(list[:i], list[i+1:]...))
			t.nIdle--
			t.mu.Unlock()
			c.nc.Close()
			return
		}
	}
	t.mu.Unlock()
}

// setIdle stores a host's idle list, dropping an empty one: hosts reached
// once (redirect targets among them) leave nothing behind. Under t.mu.
func (t *Transport) setIdle(key string, list []*conn) {
	if len(list) == 0 {
		delete(t.idle, key)
		return
	}
	t.idle[key] = list
}

// CloseIdleConnections closes every idle connection.
func (t *Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle, t.nIdle = nil, 0
	t.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			c.timer.Stop()
			c.nc.Close()
		}
	}
}

func or(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}
