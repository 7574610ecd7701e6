package openapi

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/host/adapters"
)

func TestServerSelection(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	host := strings.TrimPrefix(rec.URL, "http://")
	doc := `
openapi: 3.0.3
info: {title: servers, version: "1"}
servers:
  - url: "{scheme}://{host}/base/{version}"
    variables:
      scheme: {default: http, enum: [http, https]}
      host: {default: "` + host + `"}
      version: {default: v1, enum: [v1, v2]}
paths:
  /doc:
    get: {operationId: doc, responses: {"200": {description: ok}}}
  /path:
    servers: [{url: "http://{host}/pathlevel", variables: {host: {default: "` + host + `"}}}]
    get: {operationId: path, responses: {"200": {description: ok}}}
    post:
      operationId: op
      servers: [{url: "http://` + host + `/oplevel"}]
      responses: {"200": {description: ok}}
`
	def := defineDoc(t, doc)
	a := New(Options{})
	for _, c := range []struct {
		config map[string]any
		want   map[string]string
	}{
		{nil, map[string]string{"doc": "/base/v1/doc", "path": "/pathlevel/path", "op": "/oplevel/path"}},
		{map[string]any{"variables": map[string]any{"version": "v2"}}, map[string]string{"doc": "/base/v2/doc", "path": "/pathlevel/path"}},
		{map[string]any{"serverUrl": rec.URL + "/override/"}, map[string]string{"doc": "/override/doc", "path": "/override/path", "op": "/override/path"}},
	} {
		hydrate(t, a, "srv", def, c.config, nil)
		for tool, want := range c.want {
			mustCall(t, a, def, "srv", tool, nil)
			if got := rec.last(t).RequestURI; got != want {
				t.Errorf("%v %s: %s, want %s", c.config, tool, got, want)
			}
		}
	}

	// uspto: the scheme variable, from its default or from config.
	uspto := fixture(t, "uspto-3.0.yaml")
	for cfg, want := range map[string]string{"": "https://developer.uspto.gov/ds-api", "http": "http://developer.uspto.gov/ds-api"} {
		config := map[string]any{}
		if cfg != "" {
			config["variables"] = map[string]any{"scheme": cfg}
		}
		hydrate(t, a, "uspto", uspto, config, nil)
		svc := a.service("uspto")
		if got, err := svc.baseURL(svc.tools["list_data_sets"]); err != nil || got != want {
			t.Errorf("uspto %q: %s %v", cfg, got, err)
		}
	}
	// An operation-level server wins over the document's.
	things := fixture(t, "path-item-servers-callbacks-3.1.yaml")
	hydrate(t, a, "things", things, nil, nil)
	svc := a.service("things")
	if got, _ := svc.baseURL(svc.tools["get_things"]); got != "https://things.example.com" {
		t.Errorf("things: %s", got)
	}

	// A relative server URL resolves against the URL the document came from.
	docSrv := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/specs/petstore.yaml" {
			_, _ = w.Write(readFixture(t, "swagger-petstore-3.1.yaml"))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id": 1}`)
	})
	fetched, err := a.Definition(context.Background(), adapters.Source{URL: docSrv.URL + "/specs/petstore.yaml", Config: privateOK})
	if err != nil {
		t.Fatal(err)
	}
	docSrv.last(t)
	hydrate(t, a, "p31", fetched, nil, nil)
	mustCall(t, a, fetched, "p31", "getPetById", map[string]any{"petId": 5})
	if got := docSrv.last(t).RequestURI; got != "/api/v31/pet/5" {
		t.Errorf("relative server: %s", got)
	}
	// Inline, a relative server needs serverUrl.
	inline := fixture(t, "swagger-petstore-3.1.yaml")
	hydrate(t, a, "p31i", inline, nil, nil)
	if _, err := call(t, a, inline, "p31i", "getPetById", map[string]any{"petId": 5}); err == nil || !strings.Contains(err.Error(), "set config serverUrl") {
		t.Errorf("inline relative: %v", err)
	}
}
