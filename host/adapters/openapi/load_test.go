package openapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cyrnel/cyrnel/host/adapters"
)

func definitionErr(t *testing.T, a *Adapter, src adapters.Source) error {
	t.Helper()
	_, err := a.Definition(context.Background(), src)
	if err == nil {
		t.Fatalf("%+v imported", src)
	}
	return err
}

func TestExternalRefsRefused(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte(`{"type":"object"}`))
	}))
	defer srv.Close()
	for _, ref := range []string{
		srv.URL + "/pet.json",
		srv.URL + "/defs.yaml#/Pet",
		"file:///etc/passwd",
		"./other.yaml#/Pet",
		"other.json",
	} {
		doc := `{"openapi":"3.0.3","info":{"title":"t","version":"1"},"paths":{"/p":{"get":{"operationId":"p",
		  "responses":{"200":{"description":"ok","content":{"application/json":{"schema":{"$ref":"` + ref + `"}}}}}}}}}`
		err := definitionErr(t, New(Options{}), adapters.Source{Content: doc})
		if !strings.Contains(err.Error(), "external references are not allowed") {
			t.Errorf("%s: %v", ref, err)
		}
	}
	// A 3.1 schema $ref to an $id nobody declares is outside too.
	doc := `{"openapi":"3.1.0","info":{"title":"t","version":"1"},"paths":{"/p":{"get":{"operationId":"p",
	  "responses":{"200":{"description":"ok","content":{"application/json":{"schema":{"$ref":"` + srv.URL + `/x#a"}}}}}}}}}`
	if err := definitionErr(t, New(Options{}), adapters.Source{Content: doc}); !strings.Contains(err.Error(), "external references are not allowed") {
		t.Errorf("3.1: %v", err)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the server was asked %d times", n)
	}
}

// billionLaughs expands to about 10^9 nodes if aliases are followed blindly.
const billionLaughs = `openapi: 3.0.0
a: &a ["x","x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h,*h]
`

func TestDocumentsRefused(t *testing.T) {
	t.Parallel()
	a := New(Options{})
	for doc, want := range map[string]string{
		"":                                 "neither url nor content",
		"   \n":                            "empty document",
		`{"foo": 1}`:                       `no "openapi" or "swagger" version key`,
		"openapi: 4.0.0\ninfo: {}\n":       "unsupported OpenAPI version",
		`{"swagger": "1.2", "paths": {}}`:  "unsupported Swagger version",
		"openapi: [unclosed\n":             "neither JSON nor YAML",
		"- just\n- a list\n":               "not an object",
		`{"openapi": "3.0.0", "paths": 5}`: "load document",
		billionLaughs:                      "excessive aliasing",
	} {
		err := definitionErr(t, a, adapters.Source{Content: doc})
		if !strings.HasPrefix(err.Error(), "openapi: ") || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", doc, err, want)
		}
	}
}

func TestUnquotedSwaggerVersion(t *testing.T) {
	t.Parallel()
	def := defineDoc(t, `
swagger: 2.0
info: {title: yaml, version: "1"}
host: example.com
paths:
  /a:
    get: {operationId: a, responses: {"200": {description: ok}}}
`)
	if len(def.Tools) != 1 || def.Name != "yaml" {
		t.Fatalf("%+v", def)
	}
}

func TestFetchSource(t *testing.T) {
	t.Parallel()
	doc := readFixture(t, "petstore-3.0.yaml")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/petstore.yaml":
			_, _ = w.Write(doc)
		case "/big.yaml":
			_, _ = w.Write(make([]byte, 4096))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	a := New(Options{MaxDocumentBytes: 1 << 20})
	def, err := a.Definition(context.Background(), adapters.Source{URL: srv.URL + "/petstore.yaml", Config: privateOK})
	if err != nil || len(def.Tools) != 3 {
		t.Fatalf("%v %d", err, len(def.Tools))
	}
	var svc serviceDomain
	if err := json.Unmarshal(def.AdapterDomain, &svc); err != nil || svc.SourceURL != srv.URL+"/petstore.yaml" {
		t.Errorf("source url %q %v", svc.SourceURL, err)
	}
	for src, want := range map[string]string{
		srv.URL + "/missing": "status 404",
		"file:///etc/passwd": "only http and https",
		"ftp://example.com/": "only http and https",
	} {
		if err := definitionErr(t, a, adapters.Source{URL: src, Config: privateOK}); !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v", src, err)
		}
	}
	small := New(Options{MaxDocumentBytes: 1024})
	if err := definitionErr(t, small, adapters.Source{URL: srv.URL + "/big.yaml", Config: privateOK}); !strings.Contains(err.Error(), "larger than 1024 bytes") {
		t.Errorf("big: %v", err)
	}
	srv.Close()
	if err := definitionErr(t, a, adapters.Source{URL: srv.URL + "/petstore.yaml", Config: privateOK}); !strings.Contains(err.Error(), "fetch "+srv.URL) {
		t.Errorf("closed: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.Definition(ctx, adapters.Source{URL: "http://127.0.0.1:1/x", Config: privateOK}); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
}

func TestCompatRewrites(t *testing.T) {
	t.Parallel()
	in := `{
	  "a": {"$ref": null, "type": "string"},
	  "b": {"type": "array", "items": [{"type": "string"}, {"type": "null"}]},
	  "c": {"$id": "/schemas/c", "properties": {"x": {"$anchor": "xa", "type": "integer"}, "y": {"$ref": "#/properties/x"}}},
	  "d": {"$ref": "/schemas/c#xa"},
	  "e": {"$ref": "/schemas/c"},
	  "f": {"$ref": "/schemas/c#/properties/x"},
	  "g": {"$ref": "https://elsewhere.example/x"},
	  "example": {"items": [1, 2], "$ref": null},
	  "x-ext": {"$ref": null},
	  "properties": {"$ref": {"type": "string"}}
	}`
	out, changed, err := compat([]byte(in))
	if err != nil || !changed {
		t.Fatalf("%v %v", changed, err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"a": map[string]any{"type": "string"},
		"b": map[string]any{"type": "array", "items": map[string]any{"anyOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "null"}}}},
		"c": map[string]any{"$id": "/schemas/c", "properties": map[string]any{
			"x": map[string]any{"$anchor": "xa", "type": "integer"},
			"y": map[string]any{"$ref": "#/properties/x"}, // already local: left alone
		}},
		"d":          map[string]any{"$ref": "#/c/properties/x"},
		"e":          map[string]any{"$ref": "#/c"},
		"f":          map[string]any{"$ref": "#/c/properties/x"},
		"g":          map[string]any{"$ref": "https://elsewhere.example/x"},
		"example":    map[string]any{"items": []any{1.0, 2.0}, "$ref": nil},
		"x-ext":      map[string]any{"$ref": nil},
		"properties": map[string]any{"$ref": map[string]any{"type": "string"}},
	}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", " ")
		t.Errorf("got %s", g)
	}
	if _, changed, _ := compat([]byte(`{"openapi":"3.0.0","paths":{}}`)); changed {
		t.Error("clean document changed")
	}
}
