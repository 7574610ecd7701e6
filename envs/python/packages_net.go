package python

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/elazarl/goproxy"
)

// A build reaches the package index's origin and the file hosts the
// operator named (serve --package-host), nothing else: pip runs behind a
// forward proxy on loopback that refuses every other origin, and the
// host's own fetches (index pages, wheels, their redirects) are checked
// the same way. An index's page may link files anywhere; without this, a
// build would follow them.

// origin is u's scheme://host:port, lower-cased, with the scheme's
// default port written out; "" for anything but an http(s) URL with a
// host.
func origin(u *url.URL) string {
	scheme, port := strings.ToLower(u.Scheme), u.Port()
	if (scheme != "http" && scheme != "https") || u.Hostname() == "" {
		return ""
	}
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[scheme]
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(strings.TrimSuffix(u.Hostname(), ".")), port)
}

// CheckPackageHost checks a serve --package-host value: an origin, such
// as https://files.pythonhosted.org or http://10.0.0.5:8080, with nothing
// after the host and port.
func CheckPackageHost(s string) error {
	u, err := url.Parse(s)
	if err != nil || origin(u) == "" || u.User != nil || strings.TrimSuffix(u.Path, "/") != "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("package host %q: want an origin: http:// or https://, a host and optionally a port, nothing after them (https://files.pythonhosted.org)", s)
	}
	return nil
}

// Check reports what is wrong with the source the operator named: an index
// that is not an http(s) URL, a file host that is not an origin.
func (src PackageSource) Check() error {
	if src.Index != "" {
		u, err := url.Parse(src.Index)
		if err != nil || origin(u) == "" {
			return fmt.Errorf("package index %q: want an http:// or https:// URL", src.Index)
		}
	}
	for _, h := range src.FileHosts {
		if err := CheckPackageHost(h); err != nil {
			return err
		}
	}
	return nil
}

// origins are where a build may connect: the index's origin and the file
// hosts; none with a wheel directory.
func (src PackageSource) origins() map[string]bool {
	out := map[string]bool{}
	if src.FindLinks != "" || src.Index == "" {
		return out
	}
	if u, err := url.Parse(src.Index); err == nil && origin(u) != "" {
		out[origin(u)] = true
	}
	for _, h := range src.FileHosts {
		if u, err := url.Parse(h); err == nil && origin(u) != "" {
			out[origin(u)] = true
		}
	}
	return out
}

// fileProject is the normalised project name of the distribution (or its
// PEP 658 metadata) u names, "" when its name is not a distribution's.
func fileProject(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return distName(strings.TrimSuffix(path.Base(p.Path), ".metadata"))
}

// notTheIndex is the refusal of a URL outside the allowed origins, naming
// the package whose file it is when its name says so.
func notTheIndex(u string) error {
	what := "the index links a file at " + u
	if name := fileProject(u); name != "" {
		what = name + ": the index links its file at " + u
	}
	return fmt.Errorf("%s, which is not the package index (serve --package-host to allow it)", what)
}

// client is src's client, refusing a redirect to another origin.
func (src PackageSource) client() *http.Client {
	c := http.Client{}
	if src.Client != nil {
		c = *src.Client
	}
	allowed := src.origins()
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if !allowed[origin(req.URL)] {
			return notTheIndex(req.URL.String())
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
	return &c
}

// gate is the forward proxy pip runs behind for one build: it passes
// requests to the allowed origins (a CONNECT to an allowed https origin
// becomes a tunnel) and answers any other with 403, noting what it
// refused.
type gate struct {
	allowed map[string]bool
	srv     *http.Server
	url     string
	served  chan struct{}

	mu      sync.Mutex
	refused []string // the first few refused URLs (https://host:port for a CONNECT)
}

// refusedKept bounds what a gate remembers: the first is what is reported.
const refusedKept = 8

// openGate starts a gate on a loopback port; close stops it.
func openGate(log *slog.Logger, allowed map[string]bool) (*gate, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("packages: the proxy pip runs behind: %w", err)
	}
	g := &gate{allowed: allowed, url: "http://" + ln.Addr().String(), served: make(chan struct{})}
	logger := slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	proxy := goproxy.NewProxyHttpServer()
	proxy.Logger = logger
	// goproxy's own transport skips TLS verification: this one does not.
	proxy.Tr = http.DefaultTransport.(*http.Transport).Clone()
	proxy.OnRequest().DoFunc(func(r *http.Request, _ *goproxy.ProxyCtx) (*http.Request, *http.Response) {
		if allowed[origin(r.URL)] {
			return r, nil
		}
		return r, g.refuse(r, r.URL.String())
	})
	proxy.OnRequest().HandleConnectFunc(func(host string, ctx *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		o := origin(&url.URL{Scheme: "https", Host: host})
		if allowed[o] {
			return goproxy.OkConnect, host
		}
		ctx.Resp = g.refuse(ctx.Req, o)
		return goproxy.RejectConnect, host
	})
	g.srv = &http.Server{Handler: proxy, ReadHeaderTimeout: time.Minute, ErrorLog: logger}
	go func() {
		defer close(g.served)
		_ = g.srv.Serve(ln) // ends with close
	}()
	return g, nil
}

// refuse notes u and answers r with 403 and why.
func (g *gate) refuse(r *http.Request, u string) *http.Response {
	g.mu.Lock()
	if len(g.refused) < refusedKept {
		g.refused = append(g.refused, u)
	}
	g.mu.Unlock()
	return goproxy.NewResponse(r, goproxy.ContentTypeText, http.StatusForbidden, notTheIndex(u).Error()+"\n")
}

// firstRefused is the first URL the gate refused, "" when none.
func (g *gate) firstRefused() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.refused) == 0 {
		return ""
	}
	return g.refused[0]
}

// close stops the gate and waits for it; called once pip has exited, so
// no tunnel outlives pip's end of it.
func (g *gate) close() {
	_ = g.srv.Close()
	<-g.served
}
