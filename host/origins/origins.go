// Package origins decides which names the server answers to: the Host of a
// request and the Origin a browser sends. A web page that rebinds its own
// DNS name to this server's address (DNS rebinding) reaches it with its own
// name in both, and a page of another site sends its own Origin; both are
// refused, while clients that send no Origin (curl, SDKs) are unaffected.
package origins

import (
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
)

// Any, as an allowed name, turns the check off (a proxy in front that
// rewrites Host and checks names itself).
const Any = "*"

// Allowed is the set of host names requests may name. It grows when the
// server learns its listen address; it is safe for concurrent use.
type Allowed struct {
	mu    sync.RWMutex
	names map[string]bool
}

// New allows the loopback names and extra (host names or IP addresses; a
// port, scheme or path given with one is ignored).
func New(extra []string) *Allowed {
	a := &Allowed{names: map[string]bool{}}
	a.add("localhost", "127.0.0.1", "::1")
	for _, e := range extra {
		a.add(nameOf(e))
	}
	return a
}

// nameOf is the host name of an operator's entry: "example.com",
// "example.com:9371" and "https://example.com/" all name example.com.
func nameOf(entry string) string {
	entry = strings.TrimSpace(entry)
	if entry == Any {
		return Any
	}
	if u, err := url.Parse(entry); err == nil && u.Host != "" {
		return u.Hostname()
	}
	return hostname(entry)
}

func (a *Allowed) add(names ...string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, n := range names {
		if n != "" {
			a.names[strings.ToLower(strings.TrimSuffix(n, "."))] = true
		}
	}
}

// Listening allows the names of the address the server listens on: its
// host, or for an unspecified address (0.0.0.0, ::) every address of the
// machine's interfaces and its host name.
func (a *Allowed) Listening(addr net.Addr) {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return
	}
	if !tcp.IP.IsUnspecified() {
		a.add(tcp.IP.String())
		return
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, ia := range addrs {
			if n, ok := ia.(*net.IPNet); ok {
				a.add(n.IP.String())
			}
		}
	}
	if h, err := os.Hostname(); err == nil {
		a.add(h)
	}
}

// Names lists the allowed names (for the log).
func (a *Allowed) Names() []string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	out := make([]string, 0, len(a.names))
	for n := range a.names {
		out = append(out, n)
	}
	return out
}

func (a *Allowed) allows(name string) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.names[Any] || a.names[strings.ToLower(strings.TrimSuffix(name, "."))]
}

// Host says whether a request's Host header (host, host:port, [v6]:port)
// names this server.
func (a *Allowed) Host(host string) bool { return a.allows(hostname(host)) }

// Origin says whether a request's Origin header may reach this server: no
// Origin (a client that is not a browser), or one whose host is allowed.
// "null" (a sandboxed page, a file) is foreign.
func (a *Allowed) Origin(origin string) bool {
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return a.allows(Any)
	}
	return a.allows(u.Hostname())
}

// hostname strips a port and IPv6 brackets.
func hostname(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}
