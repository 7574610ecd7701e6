package api

import (
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"

	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/keys"
)

// Who may use each route (DESIGN §13 "Keys and roles"): the one table every
// request is checked against, keyed by method and route pattern ("*": any
// method). An admin key may use every route; an empty list means no key is
// needed. A route missing here is refused to every key but admin, and
// TestEveryRouteHasARole fails. The console's assets and the reference page
// (host/console) are served in front of the API and hold no data.
var (
	public      = []caller.Role{}
	runner      = []caller.Role{caller.Runner}
	approver    = []caller.Role{caller.Approver}
	readProcess = []caller.Role{caller.Runner, caller.Approver}
	adminOnly   = []caller.Role{caller.Admin}
	routeTable  = map[string][]caller.Role{
		// Liveness and the API's own description.
		"GET /health":           public,
		"GET /health/ready":     public,
		"GET /openapi.json":     public,
		"GET /openapi.yaml":     public,
		"GET /openapi-3.0.json": public,
		"GET /openapi-3.0.yaml": public,

		// Processes: runners run them, approvers read them.
		"POST /processes":                   runner,
		"GET /processes":                    readProcess,
		"GET /processes/{pid}":              readProcess,
		"GET /processes/{pid}/wait":         readProcess,
		"GET /processes/{pid}/events":       readProcess,
		"GET /processes/{pid}/output":       readProcess,
		"GET /processes/{pid}/stdout":       readProcess,
		"GET /processes/{pid}/stderr":       readProcess,
		"GET /processes/{pid}/code":         readProcess,
		"GET /processes/{pid}/files":        readProcess,
		"GET /processes/{pid}/files/{path}": readProcess,
		"GET /processes/{pid}/displays":     readProcess,
		"GET /processes/{pid}/tool-calls":   readProcess,
		"POST /processes/{pid}/kill":        runner,
		"POST /processes/{pid}/run":         runner,
		"DELETE /processes/{pid}":           runner,

		// Sessions and their files.
		"POST /sessions":                     runner,
		"GET /sessions":                      runner,
		"GET /sessions/{id}":                 runner,
		"DELETE /sessions/{id}":              runner,
		"GET /sessions/{id}/files":           runner,
		"GET /sessions/{id}/files/{path}":    runner,
		"PUT /sessions/{id}/files/{path}":    runner,
		"DELETE /sessions/{id}/files/{path}": runner,

		// Tools: read and invoke (as policies allow); switching is admin's.
		"GET /tools":                              runner,
		"GET /tools/{serviceId}/{toolId}":         runner,
		"GET /tools/{serviceId}/{toolId}/docs":    runner,
		"POST /tools/{serviceId}/{toolId}/invoke": runner,
		"PATCH /tools/{serviceId}/{toolId}":       adminOnly,

		// The environment: read by runners, switched by admins.
		"GET /environment":      runner,
		"GET /environment/docs": runner,
		"PUT /environment":      adminOnly,

		// Approvals and the audit of tool calls.
		"GET /approvals":               approver,
		"GET /approvals/{id}":          approver,
		"POST /approvals/{id}/approve": approver,
		"POST /approvals/{id}/deny":    approver,
		"GET /tool-calls":              approver,

		// Configuration: admin only.
		"GET /tool-policies":          adminOnly,
		"PUT /tool-policies":          adminOnly,
		"GET /modules":                adminOnly,
		"GET /modules/{id}":           adminOnly,
		"PATCH /modules/{id}":         adminOnly,
		"GET /modules/{id}/config":    adminOnly,
		"PUT /modules/{id}/config":    adminOnly,
		"GET /modules/{id}/secrets":   adminOnly,
		"PUT /modules/{id}/secrets":   adminOnly,
		"GET /services":               adminOnly,
		"POST /services":              adminOnly,
		"GET /services/{id}":          adminOnly,
		"PATCH /services/{id}":        adminOnly,
		"DELETE /services/{id}":       adminOnly,
		"POST /services/{id}/refresh": adminOnly,
		"GET /services/{id}/config":   adminOnly,
		"PUT /services/{id}/config":   adminOnly,
		"GET /services/{id}/secrets":  adminOnly,
		"PUT /services/{id}/secrets":  adminOnly,
		"POST /keys":                  adminOnly,
		"GET /keys":                   adminOnly,
		"GET /keys/{id}":              adminOnly,
		"DELETE /keys/{id}":           adminOnly,
		"GET /changes":                adminOnly,

		// The Prometheus exposition (also unauthenticated on the operator's
		// --metrics-addr listener, when set).
		"GET /metrics": adminOnly,

		// The MCP endpoint, whatever the method (it answers those it
		// does not speak itself).
		"* /mcp": runner,
	}
)

// rolesFor returns the roles that may use method on route pattern; known
// is false when the table has no entry for it.
func rolesFor(method, pattern string) (roles []caller.Role, known bool) {
	if roles, known = routeTable[method+" "+pattern]; known {
		return roles, true
	}
	roles, known = routeTable["* "+pattern]
	return roles, known
}

// allowed reports whether c holds one of roles (an admin holds them all).
func allowed(c caller.Caller, roles []caller.Role) bool {
	return slices.ContainsFunc(roles, c.Has)
}

// authorize authenticates every request to a route that needs a key and
// checks the key's roles against the route table: 401 without a valid key,
// 403 when its roles do not allow the route. The caller goes into the
// request's context. Unknown routes need a key too (then 404 or 405).
func (s *server) authorize(mux *chi.Mux) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			pattern, roles, known := route(mux, r)
			if known && len(roles) == 0 {
				next.ServeHTTP(w, r)
				return
			}
			c, err := s.Keys.Authenticate(r.Context(), bearer(r))
			if err != nil {
				s.unauthorized(w, err)
				return
			}
			if pattern != "" && !c.Has(caller.Admin) && (!known || !allowed(c, roles)) {
				writeProblem(w, http.StatusForbidden, forbidden(c, r.Method+" "+pattern, roles))
				return
			}
			next.ServeHTTP(w, r.WithContext(caller.With(r.Context(), c)))
		})
	}
}

// route finds r's route pattern in mux and the roles that may use it;
// known is false when the table has no entry (an unknown route).
func route(mux *chi.Mux, r *http.Request) (pattern string, roles []caller.Role, known bool) {
	path := r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	pattern = mux.Find(chi.NewRouteContext(), r.Method, path)
	roles, known = rolesFor(r.Method, pattern)
	return pattern, roles, known
}

// bearer is the request's bearer token ("" when there is none).
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) < 7 || !strings.EqualFold(h[:7], "Bearer ") {
		return ""
	}
	return strings.TrimSpace(h[7:])
}

// keyHelp says where a key comes from, in every 401.
const keyHelp = "send Authorization: Bearer <key>. The operator's admin key is in the data directory's api-key file " +
	"(or CYRNEL_API_KEY); an admin makes more with `cyrnel keys create --name NAME --role runner` or POST /keys."

func (s *server) unauthorized(w http.ResponseWriter, err error) {
	if !errors.Is(err, keys.ErrUnknown) && !errors.Is(err, keys.ErrExpired) {
		s.Log.Error("authenticate", "err", err)
		w.Header().Set("Retry-After", "1")
		writeProblem(w, http.StatusServiceUnavailable, "cannot check the API key now; try again")
		return
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="cyrnel"`)
	writeProblem(w, http.StatusUnauthorized, err.Error()+": "+keyHelp)
}

func forbidden(c caller.Caller, route string, roles []caller.Role) string {
	have := make([]string, len(c.Roles))
	for i, r := range c.Roles {
		have[i] = string(r)
	}
	need := []string{string(caller.Admin)}
	for _, r := range roles {
		if r != caller.Admin {
			need = append([]string{string(r)}, need...)
		}
	}
	return "key " + c.KeyID + " (roles: " + strings.Join(have, ", ") + ") may not use " + route + ": it needs the role " + strings.Join(need, " or ")
}

// declareAuth adds 401 and 403 to every operation that needs a key, with
// the roles that may use it, so clients generated from the spec know them.
func declareAuth(o *huma.OpenAPI) {
	problem := func(desc string) *huma.Response {
		return &huma.Response{Description: desc, Content: map[string]*huma.MediaType{
			"application/problem+json": {Schema: &huma.Schema{Ref: "#/components/schemas/ErrorModel"}},
		}}
	}
	for path, item := range o.Paths {
		for method, op := range map[string]*huma.Operation{
			http.MethodGet: item.Get, http.MethodPost: item.Post, http.MethodPut: item.Put,
			http.MethodPatch: item.Patch, http.MethodDelete: item.Delete,
		} {
			if op == nil {
				continue
			}
			roles, known := rolesFor(method, path)
			if known && len(roles) == 0 {
				op.Security = []map[string][]string{}
				continue
			}
			need := []string{}
			for _, r := range roles {
				need = append(need, string(r))
			}
			if !slices.Contains(need, string(caller.Admin)) {
				need = append(need, string(caller.Admin))
			}
			if op.Extensions == nil {
				op.Extensions = map[string]any{}
			}
			op.Extensions["x-cyrnel-roles"] = need
			op.Responses[strconv.Itoa(http.StatusUnauthorized)] = problem("Unauthorized: no key, or an unknown, revoked or expired one.")
			msg := "Forbidden: the key's roles do not allow this operation (it needs " + strings.Join(need, " or ") + ")."
			if prev := op.Responses[strconv.Itoa(http.StatusForbidden)]; prev != nil {
				msg = prev.Description + " " + msg
			}
			op.Responses[strconv.Itoa(http.StatusForbidden)] = problem(msg)
		}
	}
}
