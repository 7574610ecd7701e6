package openapi

import (
	"encoding/base64"
	"io"
	"net/http"
	"strings"
	"testing"
)

const securityDoc = `
openapi: 3.0.3
info: {title: sec, version: "1"}
security: [{bearer: []}]
components:
  securitySchemes:
    hdrKey: {type: apiKey, in: header, name: X-API-Key}
    qKey: {type: apiKey, in: query, name: api_key}
    cKey: {type: apiKey, in: cookie, name: sid}
    bearer: {type: http, scheme: bearer}
    basic: {type: http, scheme: Basic}
    oauth: {type: oauth2, flows: {clientCredentials: {tokenUrl: "https://example.com/token", scopes: {}}}}
    oidc: {type: openIdConnect, openIdConnectUrl: "https://example.com/.well-known/openid-configuration"}
paths:
  /h: {get: {operationId: h, security: [{hdrKey: []}], responses: {"200": {description: ok}}}}
  /q:
    get:
      operationId: q
      security: [{qKey: []}]
      parameters: [{name: a, in: query, schema: {type: string}}]
      responses: {"200": {description: ok}}
  /c:
    get:
      operationId: c
      security: [{cKey: []}]
      parameters: [{name: pref, in: cookie, schema: {type: string}}]
      responses: {"200": {description: ok}}
  /basic: {get: {operationId: basic, security: [{basic: []}], responses: {"200": {description: ok}}}}
  /o: {get: {operationId: o, security: [{oauth: [read]}], responses: {"200": {description: ok}}}}
  /oidc: {get: {operationId: oidc, security: [{oidc: []}], responses: {"200": {description: ok}}}}
  /both: {get: {operationId: both, security: [{hdrKey: [], qKey: []}], responses: {"200": {description: ok}}}}
  /alt: {get: {operationId: alt, security: [{basic: []}, {hdrKey: []}], responses: {"200": {description: ok}}}}
  /none: {get: {operationId: none, security: [], responses: {"200": {description: ok}}}}
  /anon: {get: {operationId: anon, security: [{}, {hdrKey: []}], responses: {"200": {description: ok}}}}
  /doc: {get: {operationId: doc, responses: {"200": {description: ok}}}}
`

func TestSecurity(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	def := defineDoc(t, securityDoc)
	a := New(Options{})
	all := map[string]any{
		"hdrKey": "hk", "qKey": "q k&1", "cKey": "ck", "bearer": "bt",
		"basic": map[string]any{"username": "al", "password": "pw"}, "oauth": "ot", "oidc": "it",
	}
	hydrate(t, a, "sec", def, map[string]any{"serverUrl": rec.URL}, all)
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("al:pw"))
	for _, c := range []struct {
		tool   string
		params map[string]any
		uri    string
		header map[string]string
	}{
		{"h", nil, "/h", map[string]string{"X-Api-Key": "hk", "Authorization": ""}},
		{"q", map[string]any{"a": "1"}, "/q?a=1&api_key=q%20k%261", map[string]string{"Authorization": ""}},
		{"c", map[string]any{"pref": "x"}, "/c", map[string]string{"Cookie": "pref=x; sid=ck"}},
		{"basic", nil, "/basic", map[string]string{"Authorization": basic}},
		{"o", nil, "/o", map[string]string{"Authorization": "Bearer ot"}},
		{"oidc", nil, "/oidc", map[string]string{"Authorization": "Bearer it"}},
		{"both", nil, "/both?api_key=q%20k%261", map[string]string{"X-Api-Key": "hk"}},
		{"alt", nil, "/alt", map[string]string{"Authorization": basic, "X-Api-Key": ""}},
		{"none", nil, "/none", map[string]string{"Authorization": "", "X-Api-Key": ""}},
		{"anon", nil, "/anon", map[string]string{"X-Api-Key": "hk"}},
		{"doc", nil, "/doc", map[string]string{"Authorization": "Bearer bt"}},
	} {
		mustCall(t, a, def, "sec", c.tool, c.params)
		req := rec.last(t)
		if req.RequestURI != c.uri {
			t.Errorf("%s: %s, want %s", c.tool, req.RequestURI, c.uri)
		}
		for h, want := range c.header {
			if got := req.Header.Get(h); got != want {
				t.Errorf("%s: %s = %q, want %q", c.tool, h, got, want)
			}
		}
	}

	// Only the header key set: "alt" falls to its second requirement, and
	// "anon" to nothing when even that is missing.
	hydrate(t, a, "sec", def, map[string]any{"serverUrl": rec.URL}, map[string]any{"hdrKey": "hk"})
	mustCall(t, a, def, "sec", "alt", nil)
	if req := rec.last(t); req.Header.Get("X-Api-Key") != "hk" || req.Header.Get("Authorization") != "" {
		t.Errorf("alt: %v", req.Header)
	}
	hydrate(t, a, "sec", def, map[string]any{"serverUrl": rec.URL}, nil)
	mustCall(t, a, def, "sec", "anon", nil)
	if req := rec.last(t); req.Header.Get("X-Api-Key") != "" {
		t.Errorf("anon: %v", req.Header)
	}

	// A document that declares schemes but no security uses the one whose
	// secret is set.
	bare := defineDoc(t, `
openapi: 3.0.3
info: {title: bare, version: "1"}
components: {securitySchemes: {a_key: {type: apiKey, in: header, name: X-A}, token: {type: http, scheme: bearer}}}
paths: {/x: {get: {operationId: x, responses: {"200": {description: ok}}}}}
`)
	hydrate(t, a, "bare", bare, map[string]any{"serverUrl": rec.URL}, map[string]any{"token": "tt"})
	mustCall(t, a, bare, "bare", "x", nil)
	if got := rec.last(t).Header.Get("Authorization"); got != "Bearer tt" {
		t.Errorf("bare: %q", got)
	}

	// Real documents: petstore's api_key header and the bearer scheme with
	// non-OAuth scopes.
	p3 := fixture(t, "swagger-petstore-3.0.yaml")
	hydrate(t, a, "p3", p3, map[string]any{"serverUrl": rec.URL}, map[string]any{"api_key": "special-key", "petstore_auth": "tok"})
	mustCall(t, a, p3, "p3", "getPetById", map[string]any{"petId": 5})
	if req := rec.last(t); req.Header.Get("api_key") != "special-key" || req.Header.Get("Authorization") != "" {
		t.Errorf("petstore getPetById: %v", req.Header)
	}
	mustCall(t, a, p3, "p3", "findPetsByStatus", map[string]any{"status": "sold"})
	if req := rec.last(t); req.RequestURI != "/pet/findByStatus?status=sold" || req.Header.Get("Authorization") != "Bearer tok" {
		t.Errorf("petstore findPetsByStatus: %s %v", req.RequestURI, req.Header)
	}
	nos := fixture(t, "non-oauth-scopes-3.1.yaml")
	hydrate(t, a, "nos", nos, map[string]any{"serverUrl": rec.URL}, map[string]any{"bearerAuth": "jwt.x.y"})
	mustCall(t, a, nos, "nos", "get_users", nil)
	if got := rec.last(t).Header.Get("Authorization"); got != "Bearer jwt.x.y" {
		t.Errorf("non-oauth scopes: %q", got)
	}
}

// TestRedirectDropsAPIKey: an API key header follows a redirect on the same
// host but not to another one.
func TestRedirectDropsAPIKey(t *testing.T) {
	t.Parallel()
	other := newRecorder(t, nil)
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/h":
			http.Redirect(w, r, "/final", http.StatusFound)
		case "/q":
			http.Redirect(w, r, other.URL+"/elsewhere", http.StatusFound)
		default:
			_, _ = io.WriteString(w, "{}")
		}
	})
	def := defineDoc(t, securityDoc)
	a := New(Options{})
	hydrate(t, a, "sec", def, map[string]any{"serverUrl": rec.URL}, map[string]any{"hdrKey": "hk"})
	// /h redirects on the same host: the key goes along.
	mustCall(t, a, def, "sec", "h", nil)
	rec.last(t)
	if req := rec.last(t); req.RequestURI != "/final" || req.Header.Get("X-Api-Key") != "hk" {
		t.Errorf("same host: %s %q", req.RequestURI, req.Header.Get("X-Api-Key"))
	}
	// /q, given the header key, redirects to another host: the key stays.
	doc := strings.Replace(securityDoc, "security: [{qKey: []}]", "security: [{hdrKey: []}]", 1)
	def = defineDoc(t, doc)
	hydrate(t, a, "sec", def, map[string]any{"serverUrl": rec.URL}, map[string]any{"hdrKey": "hk"})
	mustCall(t, a, def, "sec", "q", nil)
	rec.last(t)
	if req := other.last(t); req.RequestURI != "/elsewhere" || req.Header.Get("X-Api-Key") != "" {
		t.Errorf("other host: %s %q", req.RequestURI, req.Header.Get("X-Api-Key"))
	}
}
