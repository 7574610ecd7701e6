package openapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"reflect"
	"testing"
)

type part struct {
	Name, File, Type, Body string
}

func multipartParts(t *testing.T, req recorded) []part {
	t.Helper()
	mt, params, err := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		t.Fatalf("content type %q: %v", req.Header.Get("Content-Type"), err)
	}
	r := multipart.NewReader(bytes.NewReader(req.Body), params["boundary"])
	var out []part
	for {
		p, err := r.NextPart()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(p)
		out = append(out, part{Name: p.FormName(), File: p.FileName(), Type: p.Header.Get("Content-Type"), Body: string(b)})
	}
}

func TestMultipart(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)

	// Swagger 2.0 formData with a file, converted to a multipart body.
	def := fixture(t, "swagger-petstore-2.0.json")
	a := New(Options{})
	hydrate(t, a, "p2", def, map[string]any{"serverUrl": rec.URL + "/v2"}, nil)
	mustCall(t, a, def, "p2", "uploadFile", map[string]any{"petId": 9, "body": map[string]any{"additionalMetadata": "a cat", "file": "PNG…data"}})
	req := rec.last(t)
	if req.Method != "POST" || req.RequestURI != "/v2/pet/9/uploadImage" {
		t.Errorf("%s %s", req.Method, req.RequestURI)
	}
	want := []part{
		{Name: "additionalMetadata", Body: "a cat"},
		{Name: "file", File: "file", Type: "application/octet-stream", Body: "PNG…data"},
	}
	if got := multipartParts(t, req); !reflect.DeepEqual(got, want) {
		t.Errorf("parts %+v\nwant %+v", got, want)
	}

	// Per-part encoding of the style-explode fixture: contentType wins.
	def = fixture(t, "style-explode-3.0.yaml")
	hydrate(t, a, "se", def, map[string]any{"serverUrl": rec.URL}, nil)
	mustCall(t, a, def, "se", "post_test", map[string]any{"body": map[string]any{"file": "f1", "fileWithout": "png-bytes"}})
	want = []part{
		{Name: "file", File: "file", Type: "application/octet-stream", Body: "f1"},
		{Name: "fileWithout", File: "fileWithout", Type: "image/png", Body: "png-bytes"},
	}
	if got := multipartParts(t, rec.last(t)); !reflect.DeepEqual(got, want) {
		t.Errorf("parts %+v\nwant %+v", got, want)
	}

	// Arrays become one part per item; objects are JSON.
	def = defineDoc(t, `
openapi: 3.0.3
info: {title: mp, version: "1"}
paths:
  /up:
    post:
      operationId: up
      requestBody:
        content:
          multipart/form-data:
            schema:
              type: object
              properties:
                tags: {type: array, items: {type: string}}
                meta: {type: object}
                count: {type: integer}
                docs: {type: array, items: {type: string, format: binary}}
                raw: {type: object}
            encoding:
              raw: {contentType: application/json}
      responses: {"200": {description: ok}}
`)
	hydrate(t, a, "mp", def, map[string]any{"serverUrl": rec.URL}, nil)
	mustCall(t, a, def, "mp", "up", map[string]any{"body": map[string]any{
		"tags": []any{"a", "b"}, "meta": map[string]any{"k": 1}, "count": 3, "docs": []any{"d1", "d2"}, "raw": map[string]any{"x": []any{1}},
	}})
	want = []part{
		{Name: "count", Body: "3"},
		{Name: "docs", File: "docs", Type: "application/octet-stream", Body: "d1"},
		{Name: "docs", File: "docs", Type: "application/octet-stream", Body: "d2"},
		{Name: "meta", Type: "application/json", Body: `{"k":1}`},
		{Name: "raw", Type: "application/json", Body: `{"x":[1]}`},
		{Name: "tags", Body: "a"},
		{Name: "tags", Body: "b"},
	}
	if got := multipartParts(t, rec.last(t)); !reflect.DeepEqual(got, want) {
		t.Errorf("parts %+v\nwant %+v", got, want)
	}
}

func TestFormBodyAndBodyMediaTypes(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	def := fixture(t, "uspto-3.0.yaml")
	a := New(Options{})
	hydrate(t, a, "uspto", def, map[string]any{"serverUrl": rec.URL + "/ds-api"}, nil)
	mustCall(t, a, def, "uspto", "perform_search", map[string]any{"dataset": "oa_citations", "version": "v1", "body": map[string]any{"criteria": "*:*", "start": 0, "rows": 100}})
	req := rec.last(t)
	if req.RequestURI != "/ds-api/oa_citations/v1/records" || string(req.Body) != "criteria=%2A%3A%2A&rows=100&start=0" ||
		req.Header.Get("Content-Type") != "application/x-www-form-urlencoded" {
		t.Errorf("%s %q %s", req.RequestURI, req.Header.Get("Content-Type"), req.Body)
	}

	// JSON is preferred over XML and form; octet-stream bodies are the
	// string's bytes.
	def = fixture(t, "swagger-petstore-3.0.yaml")
	hydrate(t, a, "p3", def, map[string]any{"serverUrl": rec.URL}, nil)
	mustCall(t, a, def, "p3", "addPet", map[string]any{"body": map[string]any{"name": "rex", "photoUrls": []any{}}})
	if req := rec.last(t); req.Header.Get("Content-Type") != "application/json" || string(req.Body) != `{"name":"rex","photoUrls":[]}` {
		t.Errorf("addPet %q %s", req.Header.Get("Content-Type"), req.Body)
	}
	mustCall(t, a, def, "p3", "uploadFile", map[string]any{"petId": 3, "additionalMetadata": "x", "body": "\x00raw bytes"})
	req = rec.last(t)
	if req.RequestURI != "/pet/3/uploadImage?additionalMetadata=x" || req.Header.Get("Content-Type") != "application/octet-stream" || string(req.Body) != "\x00raw bytes" {
		t.Errorf("upload %s %q %q", req.RequestURI, req.Header.Get("Content-Type"), req.Body)
	}
	var td toolDomain
	_ = json.Unmarshal(toolByID(t, def, "updatePet").AdapterDomain, &td)
	if td.Body.MediaType != "application/json" {
		t.Errorf("updatePet media type %s", td.Body.MediaType)
	}
}
