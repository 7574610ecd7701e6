package mcp

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cyrnel/cyrnel/host/caller"
)

// Handler is the MCP endpoint. Sessions are kept (the SDK's stateful
// Streamable HTTP transport) so a notifications/cancelled reaches the call
// it names; the HTTP request of each call is tied to the call's context so
// an aborted request or a dropped connection ends the call too.
type Handler struct {
	sdk     http.Handler
	server  *mcp.Server
	max     int
	closing context.Context // ends with Close: the calls in flight end too
	close   context.CancelFunc
	mu      sync.Mutex
	pending map[string]context.Context // a POST's token → its context, while it is served
}

// requestHeader carries the token that finds a call's HTTP request; the
// endpoint sets it on every POST (a client's own value is replaced).
const requestHeader = "Cyrnel-Mcp-Request"

// maxBody bounds a POST's body (the SDK's own default).
const maxBody = mcp.DefaultMaxRequestBodyBytes

// answered are the requests of the capabilities this endpoint advertises
// (tools): any other request is -32601, whatever the SDK would answer.
var answered = map[string]bool{
	"initialize": true, "ping": true, "tools/list": true, "tools/call": true,
	// The 2026-07-28 discovery: the SDK answers that this stateful
	// endpoint speaks the earlier versions, and the client falls back.
	"server/discover": true,
}

func newHandler(s *mcp.Server, o Options, log *slog.Logger) *Handler {
	h := &Handler{server: s, max: o.MaxSessions, pending: map[string]context.Context{}}
	h.closing, h.close = context.WithCancel(context.Background())
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s },
		&mcp.StreamableHTTPOptions{Logger: log, SessionTimeout: o.SessionIdle})
	// A session belongs to the key that opened it: the SDK refuses its id
	// from another key (403).
	h.sdk = auth.RequireBearerToken(func(ctx context.Context, _ string, _ *http.Request) (*auth.TokenInfo, error) {
		c, ok := caller.From(ctx)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{UserID: c.KeyID}, nil
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(sdk)
	s.AddReceivingMiddleware(h.bindCalls)
	return h
}

// Close ends every call in flight (which kills the programs they run) and
// every session. A session's own Close waits for its calls to return.
func (h *Handler) Close() {
	h.close()
	for ss := range h.server.Sessions() {
		ss.Close()
	}
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		h.sdk.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			rpcError(w, http.StatusRequestEntityTooLarge, nil, jsonrpc.CodeInvalidRequest, "the request body is over 4 MiB")
			return
		}
		rpcError(w, http.StatusBadRequest, nil, jsonrpc.CodeParseError, "reading the request body: "+err.Error())
		return
	}
	if !h.check(w, body) {
		return
	}
	if r.Header.Get("Mcp-Session-Id") == "" && h.full() {
		rpcError(w, http.StatusServiceUnavailable, nil, jsonrpc.CodeInternalError, "too many MCP sessions: end one (DELETE /mcp with its Mcp-Session-Id) or retry later")
		return
	}
	token := rand.Text()
	h.mu.Lock()
	h.pending[token] = r.Context()
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		delete(h.pending, token)
		h.mu.Unlock()
	}()
	r = r.Clone(r.Context())
	r.Header.Set(requestHeader, token)
	r.Body = io.NopCloser(bytes.NewReader(body))
	h.sdk.ServeHTTP(w, r)
}

// check answers a body that is not JSON-RPC, or a request for a method this
// endpoint does not serve, with a JSON-RPC error; true lets it through.
// A batch (a JSON array) is left to the SDK.
func (h *Handler) check(w http.ResponseWriter, body []byte) bool {
	if !json.Valid(body) {
		rpcError(w, http.StatusBadRequest, nil, jsonrpc.CodeParseError, "parse error: the body is not JSON")
		return false
	}
	if b := bytes.TrimSpace(body); len(b) > 0 && b[0] == '[' {
		return true
	}
	msg, err := jsonrpc.DecodeMessage(body)
	if err != nil {
		rpcError(w, http.StatusBadRequest, nil, jsonrpc.CodeInvalidRequest, "invalid request: "+err.Error())
		return false
	}
	if req, ok := msg.(*jsonrpc.Request); ok && req.IsCall() && !answered[req.Method] {
		rpcError(w, http.StatusOK, req.ID.Raw(), jsonrpc.CodeMethodNotFound, "method not found: "+req.Method+" (this server offers tools only)")
		return false
	}
	return true
}

// full tells whether a new session would pass the bound.
func (h *Handler) full() bool {
	n := 0
	for ss := range h.server.Sessions() {
		// Only initialized sessions count: a client's server/discover probe
		// leaves a connection behind for a moment that is not one.
		if ss.InitializeParams() != nil {
			n++
		}
	}
	return n >= h.max
}

// rpcError answers with a JSON-RPC error. id is the request's, or nil
// (null) when it could not be read, as JSON-RPC 2.0 requires.
func rpcError(w http.ResponseWriter, status int, id any, code int64, msg string) {
	b, err := json.Marshal(struct {
		JSONRPC string         `json:"jsonrpc"`
		ID      any            `json:"id"`
		Error   *jsonrpc.Error `json:"error"`
	}{"2.0", id, &jsonrpc.Error{Code: code, Message: msg}})
	if err != nil {
		http.Error(w, msg, status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// bindCalls ends a tool call when its HTTP request ends (the client aborted
// it or the connection dropped), as well as when the client sends
// notifications/cancelled or the session closes (the SDK's own context).
func (h *Handler) bindCalls(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if method != "tools/call" {
			return next(ctx, method, req)
		}
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(h.closing, func() { cancel(errors.New("the MCP endpoint is closing")) })
		defer stop()
		if extra := req.GetExtra(); extra != nil {
			h.mu.Lock()
			httpCtx := h.pending[extra.Header.Get(requestHeader)]
			h.mu.Unlock()
			if httpCtx != nil {
				stop := context.AfterFunc(httpCtx, func() { cancel(errors.New("the HTTP request of the call ended")) })
				defer stop()
			}
		}
		return next(ctx, method, req)
	}
}

// Options bound the endpoint's sessions.
type Options struct {
	// MaxSessions is how many sessions may be open at once (default 256);
	// a new one past it is refused (503).
	MaxSessions int
	// SessionIdle ends a session after this long without a request
	// (default 30 min).
	SessionIdle time.Duration
}
