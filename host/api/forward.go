package api

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/cyrnel/cyrnel/host/peer"
	"github.com/cyrnel/cyrnel/host/session"
)

// Peers are the other hosts sharing this host's database (DESIGN §13
// "Several hosts, continued").
type Peers interface {
	// Self is this host's id.
	Self() string
	// Address is where hostID is reached (host:port or a URL) while its
	// lease lives; an error when it has none.
	Address(ctx context.Context, hostID string) (string, error)
}

// peekLimit bounds how much of a body is read to find the session it
// names: the largest body of the routes that name one in it.
const peekLimit = 8 << 20

// forwarder forwards requests for a session another host runs to that
// host, which authenticates them again itself.
type forwarder struct {
	s         *server
	mux       *chi.Mux
	transport http.RoundTripper
}

// forwardSessions is the middleware that sends a request for a session live
// on another host there: every /sessions/{id} route and POST /processes
// with a session in its body. MCP calls are not forwarded (an MCP session
// lives on the host that opened it, which the other host does not know):
// host/mcp sends a run in such a session on itself. A request already
// forwarded, or for a session this caller does not see, that ended or that
// runs here, is served here.
func (s *server) forwardSessions(mux *chi.Mux) func(http.Handler) http.Handler {
	f := &forwarder{s: s, mux: mux, transport: peer.Transport()}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get(peer.ForwardedHeader) != "" {
				next.ServeHTTP(w, r)
				return
			}
			id := f.sessionOf(w, r)
			if id == "" {
				next.ServeHTTP(w, r)
				return
			}
			row, err := s.Sessions.Get(r.Context(), id)
			if err != nil || session.State(row.State) == session.Ended || row.HostID == s.Peers.Self() {
				next.ServeHTTP(w, r) // answered here: not found, ended, local, or 503
				return
			}
			addr, err := s.Peers.Address(r.Context(), row.HostID)
			if err != nil {
				s.Log.Info("cannot forward to a session's host", "session", id, "host", row.HostID, "err", err)
				unreachable(w, id, row.HostID)
				return
			}
			f.proxy(w, r, id, row.HostID, addr)
		})
	}
}

// unreachable answers 503 for a session whose host cannot be reached now:
// it is ended host_lost once its lease runs out, or answers again.
func unreachable(w http.ResponseWriter, id, hostID string) {
	w.Header().Set("Retry-After", "1")
	writeProblem(w, http.StatusServiceUnavailable, "session "+id+" runs on host "+hostID+", which cannot be reached now; try again")
}

// proxy sends r to the host at addr with its Authorization header and
// body, and streams the answer back (an event stream as it comes).
func (f *forwarder) proxy(w http.ResponseWriter, r *http.Request, id, hostID, addr string) {
	target, err := peer.BaseURL(addr)
	if err != nil {
		f.s.Log.Error("a host advertises an unusable address", "host", hostID, "addr", addr, "err", err)
		unreachable(w, id, hostID)
		return
	}
	self := f.s.Peers.Self()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
			pr.Out.Header.Set(peer.ForwardedHeader, self)
		},
		Transport:     f.transport,
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if resp.StatusCode == http.StatusUnauthorized {
				// This host accepted the key: the hosts' bootstrap keys
				// differ, or a revocation has reached one of them only.
				f.s.Log.Warn("a host refused a key this host accepted (hosts sharing a database must share CYRNEL_API_KEY)", "session", id, "host", hostID)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			f.s.Log.Warn("forward a session's request", "session", id, "host", hostID, "addr", addr, "err", err)
			unreachable(w, id, hostID)
		},
	}
	rp.ServeHTTP(w, r)
}

// sessionOf is the session r is about ("" when none): the {id} of a
// /sessions/{id} route, or the session a body names.
func (f *forwarder) sessionOf(w http.ResponseWriter, r *http.Request) string {
	pattern, _, _ := route(f.mux, r)
	switch {
	case strings.HasPrefix(pattern, "/sessions/{id}"):
		p := r.URL.RawPath
		if p == "" {
			p = r.URL.Path
		}
		seg := strings.Split(strings.TrimPrefix(p, "/"), "/")
		if len(seg) < 2 {
			return ""
		}
		id, err := url.PathUnescape(seg[1])
		if err != nil {
			return ""
		}
		return id
	case r.Method == http.MethodPost && pattern == "/processes":
		var body struct {
			Session string `json:"session"`
		}
		peek(w, r, &body)
		return body.Session
	}
	return ""
}

// peekTimeout bounds how long a peeked body may take to arrive, as huma's
// BodyReadTimeout does for the bodies it reads.
const peekTimeout = 5 * time.Second

// peek decodes r's JSON body into v, if it can, and leaves the body as it
// was for whoever reads it next (a body past peekLimit is not decoded). It
// bounds the read with a deadline of its own: once a body is read to its
// end the server watches the connection with no deadline, and one set
// after that (huma's BodyReadTimeout) would end the watch and cancel the
// request, so the routes whose bodies are peeked set none (peekedBody).
func peek(w http.ResponseWriter, r *http.Request, v any) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength > peekLimit {
		return
	}
	_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(peekTimeout))
	buf, err := io.ReadAll(io.LimitReader(r.Body, peekLimit+1))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
	if err != nil || len(buf) > peekLimit {
		return
	}
	_ = json.Unmarshal(buf, v) // not JSON: the route's handler says so
}

// peekedBody is the BodyReadTimeout of an operation whose body the
// forwarding middleware may have read already: none when it runs (it set
// its own deadline), huma's default otherwise.
func (s *server) peekedBody() time.Duration {
	if s.Peers != nil && s.Sessions != nil {
		return -1
	}
	return 0
}
