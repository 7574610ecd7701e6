// Package api is cyrnel's HTTP API: huma v2 operations on a chi router, RFC
// 9457 problems for every error, bearer authentication. It is the only layer
// that maps errors to HTTP statuses.
package api

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humachi"
	"github.com/go-chi/chi/v5"

	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/gate"
	"github.com/cyrnel/cyrnel/host/keys"
	"github.com/cyrnel/cyrnel/host/modules"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/services"
	"github.com/cyrnel/cyrnel/host/session"
	"github.com/cyrnel/cyrnel/host/store"
)

// Title, version and description of the API in the spec. SpecVersion is the
// version of the HTTP contract, not of the build, so the committed spec does
// not change with every release.
const (
	Title       = "cyrnel"
	SpecVersion = "0.1.0"
	description = "Run short programs for AI agents and REST clients in sandboxed environments; programs call tools through the host."
)

// Deps are what the API serves.
type Deps struct {
	Log     *slog.Logger
	Version string
	// Keys authenticate requests (nil: no authentication, every request
	// acts as the host itself).
	Keys        Keys
	Processes   Processes
	Environment Environment
	Modules     Modules
	Services    Services
	Tools       Tools
	Sessions    Sessions
	MCP         http.Handler // the MCP endpoint, mounted at /mcp when set
	Hosts       Hosts        // nil: any Host and Origin
	// Peers are the other hosts on the database, to which requests for
	// their sessions are forwarded (nil: this host is alone).
	Peers Peers
	// Tool governance: policies, approvals, the audit and the gate every
	// tool call passes.
	Policies  Policies
	Approvals Approvals
	ToolCalls ToolCalls
	Gate      Gate
	// Ready says whether the host can serve work (GET /health/ready); nil:
	// always.
	Ready Readiness
	// Sandbox is what the machine gives every sandbox, decided at
	// start-up (GET /environment).
	Sandbox modules.HostSandbox
	// Changes is the record of configuration changes.
	Changes Changes
	// Metrics serves GET /metrics behind authentication (the admin role) (nil: no route).
	Metrics http.Handler
	// Requests counts requests by route template (nil: not counted).
	Requests RequestObserver
	// Tracing, when its provider is set, traces each request.
	Tracing Tracing
}

type server struct {
	Deps
}

// Hosts decides which names a request may carry: its Host, and the Origin a
// browser adds (empty when there is none).
type Hosts interface {
	Host(host string) bool
	Origin(origin string) bool
}

// New builds the HTTP handler and the huma API (whose OpenAPI document is
// the spec).
func New(d Deps) (http.Handler, huma.API) {
	r := chi.NewRouter()
	r.NotFound(func(w http.ResponseWriter, _ *http.Request) {
		writeProblem(w, http.StatusNotFound, "no such route")
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		writeProblem(w, http.StatusMethodNotAllowed, "method "+req.Method+" is not allowed here")
	})
	s := &server{d}
	r.Use(filePaths)
	traced := d.Tracing.Provider != nil
	if d.Requests != nil || traced {
		r.Use(observe(r, d.Requests, traced))
	}
	if d.Hosts != nil {
		r.Use(checkHosts(r, d.Hosts))
	}
	if d.Keys != nil {
		r.Use(s.authorize(r))
	}
	bodies := map[string]bool{}
	r.Use(jsonBodies(r, bodies))
	if d.Peers != nil && d.Sessions != nil {
		r.Use(s.forwardSessions(r))
	}
	api := humachi.New(r, Config())
	s.registerHealth(api)
	s.registerProcesses(api)
	s.registerProcessResults(api)
	s.registerProcessControl(api)
	s.registerEvents(api)
	s.registerEnvironment(api)
	s.registerModuleSettings(api)
	s.registerSettings(api, "/modules", "Module", " (the active environment is replaced by one set up with it, the old one drains; if that set-up fails, nothing changes)."+
		" A config whose sandbox turns a layer off (or network on) is refused with 403 unless the server was started with --allow-unsandboxed.", d.Modules, http.StatusForbidden)
	s.registerServices(api)
	s.registerSettings(api, "/services", "Service", " (the adapter is given the new state).", d.Services)
	s.registerTools(api)
	s.registerToolPolicies(api)
	s.registerApprovals(api)
	s.registerAudit(api)
	s.registerSessions(api)
	s.registerSessionFiles(api)
	s.registerKeys(api)
	s.registerChanges(api)
	if d.MCP != nil {
		r.Handle("/mcp", d.MCP)
	}
	if d.Metrics != nil {
		r.Method(http.MethodGet, "/metrics", d.Metrics)
	}
	nullEnums(api.OpenAPI())
	declareAuth(api.OpenAPI())
	describeEventStream(api.OpenAPI(), "/processes/{pid}/events")
	declareErrors(api.OpenAPI(), bodies)
	serveOpenAPI30(r, api.OpenAPI())
	if traced {
		return traceRequests(r, d.Tracing), api
	}
	return r, api
}

// Config is the huma configuration: no $schema fields or Link headers in
// responses (bodies carry exactly their documented fields), unknown query
// parameters rejected.
func Config() huma.Config {
	cfg := huma.DefaultConfig(Title, SpecVersion)
	cfg.CreateHooks = nil
	cfg.SchemasPath = ""
	cfg.DocsPath = "" // the offline reference page is host/console's
	cfg.RejectUnknownQueryParameters = true
	cfg.Formats = map[string]huma.Format{"application/json": jsonFormat, "json": jsonFormat}
	cfg.Info.Description = description
	cfg.Servers = []*huma.Server{{URL: DefaultServer, Description: "cyrnel serve on its default address (--addr names another)"}}
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		"bearer": {Type: "http", Scheme: "bearer", Description: "An API key: the operator's (CYRNEL_API_KEY or the data directory's api-key file) or one made with POST /keys. Each operation's x-cyrnel-roles lists the roles that may use it."},
	}
	cfg.Security = []map[string][]string{{"bearer": {}}}
	return cfg
}

// filePaths lets a file path under /processes/{pid}/files/ or
// /sessions/{id}/files/ contain "/" unencoded: the router matches one
// segment per parameter, so the rest of the path is handed to it
// percent-encoded, as the one {path} parameter it is (the handlers decode
// it and refuse a path that leaves the workspace).
func filePaths(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parts := strings.SplitN(r.URL.EscapedPath(), "/", 5) // "", kind, id, "files", path
		if len(parts) == 5 && (parts[1] == "processes" || parts[1] == "sessions") && parts[3] == "files" && strings.Contains(parts[4], "/") {
			r = r.Clone(r.Context())
			r.URL.RawPath = strings.Join(parts[:4], "/") + "/" + strings.ReplaceAll(parts[4], "/", "%2F")
		}
		next.ServeHTTP(w, r)
	})
}

// checkHosts refuses, before the key is looked at, a request that names a
// host this server does not answer to (a DNS-rebinding page names its own)
// or comes from a foreign page's Origin, as the MCP specification requires
// of its endpoint: 403 naming the header. Liveness and the spec stay open.
func checkHosts(mux *chi.Mux, h Hosts) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, roles, known := route(mux, r); !known || len(roles) > 0 {
				if !h.Host(r.Host) {
					writeProblemDetail(w, http.StatusForbidden, "this server does not answer to that host name (the operator allows more with --allowed-hosts)",
						&huma.ErrorDetail{Location: "header.Host", Message: "not an allowed host name", Value: r.Host})
					return
				}
				if origin := r.Header.Get("Origin"); !h.Origin(origin) {
					writeProblemDetail(w, http.StatusForbidden, "requests from that origin are refused (the operator allows more with --allowed-hosts)",
						&huma.ErrorDetail{Location: "header.Origin", Message: "not an allowed origin", Value: origin})
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	}
}

func writeProblem(w http.ResponseWriter, status int, detail string) {
	writeProblemDetail(w, status, detail)
}

// writeProblemDetail writes a problem outside huma's handlers (middleware,
// unknown routes), with its field details.
func writeProblemDetail(w http.ResponseWriter, status int, detail string, errs ...*huma.ErrorDetail) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	b, _ := json.Marshal(&huma.ErrorModel{Title: http.StatusText(status), Status: status, Detail: detail, Errors: errs})
	w.Write(b)
}

// where maps a field as the domain names it (schema.FieldError) to where it
// sits in the request. Each operation knows its request's shape.
type where func(field string) string

// inBody: the body holds the domain input's fields (code → body.code).
func inBody(field string) string {
	if field == "" {
		return "body"
	}
	return "body." + field
}

// isBody: the body is the domain's first segment itself, as the config of
// PUT …/config is (config.timeoutMs → body.timeoutMs, secrets → body).
func isBody(field string) string {
	if i := strings.IndexAny(field, ".["); i >= 0 {
		return "body" + field[i:]
	}
	return "body"
}

// inPath: the path names the resource and the file; the body is the file
// (a session's or a process's files: path → path.path, "" → body).
func inPath(field string) string {
	if field == "" {
		return "body"
	}
	return "path." + field
}

// notInRequest: the field is stored state the request only names (a
// service's source on refresh); it is reported as the domain names it.
func notInRequest(field string) string { return field }

// problem maps a domain error to an RFC 9457 problem, with bad input located
// as inBody. Anything unknown is a 500 whose details go to the log, not the
// client.
func (s *server) problem(ctx context.Context, err error) error { return s.problemAt(ctx, err, inBody) }

// problemAt is problem with bad input located by at.
func (s *server) problemAt(ctx context.Context, err error, at where) error {
	var inv *schema.FieldError
	var unsandboxed *modules.UnsandboxedError
	var undeclared *modules.UndeclaredError
	switch {
	case errors.As(err, &inv):
		return invalid(inv, at)
	case errors.As(err, &unsandboxed):
		return forbiddenSandbox(unsandboxed, at)
	case errors.As(err, &undeclared):
		// Only the operator declares interpreters, at start-up.
		return huma.Error403Forbidden(undeclared.Error(), &huma.ErrorDetail{Location: at(undeclared.Field), Message: undeclared.Err.Error()})
	case errors.Is(err, gate.ErrBlocked), errors.Is(err, gate.ErrDenied), errors.Is(err, gate.ErrNeedsApproval):
		return huma.Error403Forbidden(err.Error())
	case errors.Is(err, keys.ErrNotFound):
		return huma.Error404NotFound(err.Error())
	case errors.Is(err, keys.ErrBootstrap):
		return huma.Error403Forbidden(err.Error())
	case errors.Is(err, approval.ErrNotFound):
		return huma.Error404NotFound(err.Error())
	case errors.Is(err, approval.ErrDecided):
		return huma.Error409Conflict(err.Error())
	case errors.Is(err, approval.ErrOwnExecution):
		return huma.Error403Forbidden(err.Error())
	case errors.Is(err, session.ErrNotOwner):
		return huma.Error403Forbidden(err.Error(), &huma.ErrorDetail{Location: at("session"), Message: session.ErrNotOwner.Error()})
	case errors.Is(err, services.ErrNotFound):
		return huma.Error404NotFound(err.Error())
	case errors.Is(err, services.ErrExists), errors.Is(err, services.ErrUnavailable):
		return huma.Error409Conflict(err.Error())
	case errors.Is(err, services.ErrAdapter):
		return huma.Error502BadGateway(err.Error())
	case errors.Is(err, process.ErrNotFound), errors.Is(err, modules.ErrUnknownModule):
		return huma.Error404NotFound(err.Error())
	case errors.Is(err, process.ErrConflict), errors.Is(err, modules.ErrActive):
		return huma.Error409Conflict(err.Error())
	case errors.Is(err, modules.ErrNotEnvironment), errors.Is(err, modules.ErrDisabled):
		return huma.Error422UnprocessableEntity(err.Error(), &huma.ErrorDetail{Location: "body.module", Message: err.Error()})
	case errors.Is(err, modules.ErrSetup):
		// From PUT /environment the module, from a config change the body.
		return huma.Error422UnprocessableEntity(err.Error(), &huma.ErrorDetail{Location: "body", Message: err.Error()})
	case errors.Is(err, modules.ErrNoEnvironment), errors.Is(err, control.ErrStopped):
		return huma.Error503ServiceUnavailable(err.Error())
	case errors.Is(err, session.ErrNotFound), errors.Is(err, session.ErrFileNotFound), errors.Is(err, process.ErrFileNotFound):
		return huma.Error404NotFound(err.Error())
	case errors.Is(err, session.ErrEnded):
		return huma.Error409Conflict(err.Error())
	case errors.Is(err, session.ErrTooMany), errors.Is(err, session.ErrBusy):
		return huma.NewError(http.StatusTooManyRequests, err.Error())
	case errors.Is(err, session.ErrStopping):
		return huma.Error503ServiceUnavailable(err.Error())
	case store.Full(err):
		// The detail says the disk is full, not the database's wording.
		return huma.NewError(http.StatusInsufficientStorage, process.ErrFull.Error()+": delete processes or free space in the data directory")
	}
	if store.Unavailable(err) {
		s.Log.WarnContext(ctx, "the database cannot answer", "err", err)
		return unavailable()
	}
	s.Log.ErrorContext(ctx, "request failed", "err", err)
	return huma.Error500InternalServerError("internal error")
}

// retryAfter is the Retry-After of a 503 for a database that cannot
// answer: the time a restart or a failover usually takes.
const retryAfter = "2"

// unavailable is 503 with Retry-After (DESIGN §13): the database cannot
// answer now, nothing was done, the same request may succeed shortly.
func unavailable() error {
	return huma.ErrorWithHeaders(huma.Error503ServiceUnavailable("the database cannot be reached now; nothing was done, retry shortly"),
		http.Header{"Retry-After": {retryAfter}})
}

// forbiddenSandbox is 403: the config is valid, but weakening the sandbox is
// the operator's decision at start-up, not an API caller's.
func forbiddenSandbox(e *modules.UnsandboxedError, at where) error {
	details := make([]error, 0, len(e.Fields))
	for _, f := range e.Fields {
		if e.Stored != "" {
			details = append(details, &huma.ErrorDetail{Location: "body.module", Message: "its stored config sets " + f, Value: e.Stored})
			continue
		}
		details = append(details, &huma.ErrorDetail{Location: at("config." + f), Message: modules.ErrUnsandboxed.Error()})
	}
	return huma.Error403Forbidden(e.Error(), details...)
}

// invalid renders a domain validation error: one detail per failing path,
// located like huma's own (body.config.serverUrl, body.parameters.items[0]).
func invalid(e *schema.FieldError, at where) error {
	field := at(e.Field)
	if len(e.Problems) == 0 {
		return huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: field, Message: e.Message})
	}
	details := make([]error, 0, len(e.Problems))
	for _, p := range e.Problems {
		details = append(details, &huma.ErrorDetail{Location: field + dotted(p.Path), Message: p.Message})
	}
	return huma.Error422UnprocessableEntity(e.Message, details...)
}

// orEmpty makes a list's items [] rather than null, as the spec promises,
// whatever the domain returns for none.
func orEmpty[T any](items []T) []T {
	if items == nil {
		return []T{}
	}
	return items
}

// dotted turns a JSON pointer into huma's location syntax: /a/0/b → .a[0].b
func dotted(pointer string) string {
	if pointer == "" {
		return ""
	}
	var b strings.Builder
	for _, tok := range strings.Split(pointer[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		if _, err := strconv.Atoi(tok); err == nil {
			b.WriteString("[" + tok + "]")
		} else {
			b.WriteString("." + tok)
		}
	}
	return b.String()
}
