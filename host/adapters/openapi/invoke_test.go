package openapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/adapters"
)

func TestInvokePetstore(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/pets/missing":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"code": 404, "message": "no such pet", "big": 12345678901234567890}`)
		case "/v1/pets/text":
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Add("X-Multi", "a")
			w.Header().Add("X-Multi", "b")
			_, _ = io.WriteString(w, "héllo")
		case "/v1/pets/binary":
			w.Header().Set("Content-Type", "image/png")
			_, _ = w.Write([]byte{0x89, 'P', 'N', 'G', 0xff, 0x00})
		case "/v1/pets/empty":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `[{"id": 1, "name": "rex"}]`)
		}
	})
	def := fixture(t, "petstore-3.0.yaml")
	a := New(Options{})
	hydrate(t, a, "pets", def, map[string]any{"serverUrl": rec.URL + "/v1/"}, nil)

	list := mustCall(t, a, def, "pets", "listPets", map[string]any{"limit": 5})
	res := list
	req := rec.last(t)
	if req.Method != "GET" || req.RequestURI != "/v1/pets?limit=5" || len(req.Body) != 0 {
		t.Errorf("wire %+v", req)
	}
	if res["status"] != 200 || res["headers"].(map[string]any)["content-type"] != "application/json" {
		t.Errorf("result %v", res)
	}
	if !reflect.DeepEqual(res["body"], []any{map[string]any{"id": json.Number("1"), "name": "rex"}}) {
		t.Errorf("body %#v", res["body"])
	}

	mustCall(t, a, def, "pets", "showPetById", map[string]any{"petId": "a b/c?d"})
	if req := rec.last(t); req.RequestURI != "/v1/pets/a%20b%2Fc%3Fd" {
		t.Errorf("path escaping: %s", req.RequestURI)
	}

	mustCall(t, a, def, "pets", "createPets", map[string]any{"body": map[string]any{"id": 7, "name": "rex", "tag": "dog"}})
	req = rec.last(t)
	if req.Method != "POST" || req.RequestURI != "/v1/pets" || req.Header.Get("Content-Type") != "application/json" ||
		string(req.Body) != `{"id":7,"name":"rex","tag":"dog"}` {
		t.Errorf("create: %s %s %q %s", req.Method, req.RequestURI, req.Header.Get("Content-Type"), req.Body)
	}

	// A non-2xx status is a result; big numbers stay exact.
	res = mustCall(t, a, def, "pets", "showPetById", map[string]any{"petId": "missing"})
	rec.last(t)
	if res["status"] != 404 || res["body"].(map[string]any)["big"] != json.Number("12345678901234567890") {
		t.Errorf("404: %v", res)
	}
	res = mustCall(t, a, def, "pets", "showPetById", map[string]any{"petId": "text"})
	rec.last(t)
	if res["body"] != "héllo" || !reflect.DeepEqual(res["headers"].(map[string]any)["x-multi"], []any{"a", "b"}) {
		t.Errorf("text: %v", res)
	}
	res = mustCall(t, a, def, "pets", "showPetById", map[string]any{"petId": "binary"})
	rec.last(t)
	if res["bodyEncoding"] != "base64" || res["body"] != base64.StdEncoding.EncodeToString([]byte{0x89, 'P', 'N', 'G', 0xff, 0x00}) {
		t.Errorf("binary: %v", res)
	}
	res = mustCall(t, a, def, "pets", "showPetById", map[string]any{"petId": "empty"})
	rec.last(t)
	if res["status"] != 204 || res["body"] != nil {
		t.Errorf("empty: %v", res)
	}
	// Results fit the tool's output schema.
	if err := validate(t, toolByID(t, def, "listPets").OutputSchema, roundTrip(t, list)); err != nil {
		t.Errorf("result vs output schema: %v", err)
	}
}

// TestStyleExplode sends the style-explode fixture's arrays.
func TestStyleExplode(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	def := fixture(t, "style-explode-3.0.yaml")
	a := New(Options{})
	hydrate(t, a, "se", def, map[string]any{"serverUrl": rec.URL}, nil)
	list := []any{"a b", "c,d"}
	mustCall(t, a, def, "se", "get_test", map[string]any{
		"foo": list, "bar": list, "baz": list,
		"X_Foo": list, "X_Bar": list, "X_Baz": list, "X_FooBar": list,
	})
	req := rec.last(t)
	// foo: form+explode; bar: spaceDelimited (not exploded); baz: explode
	// with the default form style.
	if want := "/test?foo=a%20b&foo=c%2Cd&bar=a%20b%20c%2Cd&baz=a%20b&baz=c%2Cd"; req.RequestURI != want {
		t.Errorf("query\n got %s\nwant %s", req.RequestURI, want)
	}
	for _, h := range []string{"X-Foo", "X-Bar", "X-Baz", "X-Foobar"} {
		if got := req.Header.Values(h); !reflect.DeepEqual(got, []string{"a b,c,d"}) {
			t.Errorf("%s: %q", h, got)
		}
	}
}

const stylesDoc = `
openapi: 3.0.3
info: {title: styles, version: "1"}
paths:
  /s/{prim}/{arr}/{obj}/{objx}:
    get:
      operationId: simple
      parameters:
        - {name: prim, in: path, required: true, schema: {type: integer}}
        - {name: arr, in: path, required: true, schema: {type: array, items: {type: string}}}
        - {name: obj, in: path, required: true, schema: {type: object}}
        - {name: objx, in: path, required: true, explode: true, schema: {type: object}}
      responses: {"200": {description: ok}}
  /l/{prim}{arr}{arrx}{obj}{objx}:
    get:
      operationId: label
      parameters:
        - {name: prim, in: path, required: true, style: label, schema: {type: string}}
        - {name: arr, in: path, required: true, style: label, schema: {type: array}}
        - {name: arrx, in: path, required: true, style: label, explode: true, schema: {type: array}}
        - {name: obj, in: path, required: true, style: label, schema: {type: object}}
        - {name: objx, in: path, required: true, style: label, explode: true, schema: {type: object}}
      responses: {"200": {description: ok}}
  /m/{prim}{arr}{arrx}{obj}{objx}:
    get:
      operationId: matrix
      parameters:
        - {name: prim, in: path, required: true, style: matrix, schema: {type: boolean}}
        - {name: arr, in: path, required: true, style: matrix, schema: {type: array}}
        - {name: arrx, in: path, required: true, style: matrix, explode: true, schema: {type: array}}
        - {name: obj, in: path, required: true, style: matrix, schema: {type: object}}
        - {name: objx, in: path, required: true, style: matrix, explode: true, schema: {type: object}}
      responses: {"200": {description: ok}}
  /q:
    get:
      operationId: query
      parameters:
        - {name: form, in: query, explode: false, schema: {type: array}}
        - {name: pipes, in: query, style: pipeDelimited, schema: {type: array}}
        - {name: spaces, in: query, style: spaceDelimited, schema: {type: object}}
        - {name: flat, in: query, schema: {type: object}}
        - {name: packed, in: query, explode: false, schema: {type: object}}
        - {name: filter, in: query, style: deepObject, explode: true, schema: {type: object}}
        - {name: raw, in: query, allowReserved: true, schema: {type: string}}
        - {name: plain, in: query, schema: {type: string}}
        - {name: n, in: query, schema: {type: number}}
        - {name: ids, in: query, style: deepObject, schema: {type: array}}
      responses: {"200": {description: ok}}
  /h:
    get:
      operationId: headers
      parameters:
        - {name: X-Obj, in: header, schema: {type: object}}
        - {name: X-Objx, in: header, explode: true, schema: {type: object}}
        - {name: X-Num, in: header, schema: {type: integer}}
        - {name: c_arr, in: cookie, explode: false, schema: {type: array}}
        - {name: c_exp, in: cookie, schema: {type: array}}
        - {name: c_obj, in: cookie, explode: false, schema: {type: object}}
        - {name: c_str, in: cookie, schema: {type: string}}
      responses: {"200": {description: ok}}
`

// TestParameterStyles checks every style/explode combination on the wire,
// with the examples of the OpenAPI specification's style table.
func TestParameterStyles(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	def := defineDoc(t, stylesDoc)
	a := New(Options{})
	hydrate(t, a, "st", def, map[string]any{"serverUrl": rec.URL}, nil)
	arr := []any{"blue", "black", "brown"}
	obj := map[string]any{"R": 100, "G": 200, "B": 150}

	mustCall(t, a, def, "st", "simple", map[string]any{"prim": 5, "arr": arr, "obj": obj, "objx": obj})
	if got, want := rec.last(t).RequestURI, "/s/5/blue,black,brown/B,150,G,200,R,100/B=150,G=200,R=100"; got != want {
		t.Errorf("simple\n got %s\nwant %s", got, want)
	}
	mustCall(t, a, def, "st", "label", map[string]any{"prim": "blue", "arr": arr, "arrx": arr, "obj": obj, "objx": obj})
	if got, want := rec.last(t).RequestURI, "/l/.blue.blue,black,brown.blue.black.brown.B,150,G,200,R,100.B=150.G=200.R=100"; got != want {
		t.Errorf("label\n got %s\nwant %s", got, want)
	}
	mustCall(t, a, def, "st", "matrix", map[string]any{"prim": true, "arr": arr, "arrx": arr, "obj": obj, "objx": obj})
	if got, want := rec.last(t).RequestURI, "/m/;prim=true;arr=blue,black,brown;arrx=blue;arrx=black;arrx=brown;obj=B,150,G,200,R,100;B=150;G=200;R=100"; got != want {
		t.Errorf("matrix\n got %s\nwant %s", got, want)
	}

	mustCall(t, a, def, "st", "query", map[string]any{
		"form": arr, "pipes": arr, "spaces": obj, "flat": map[string]any{"x": "1 2", "y": true},
		"packed": obj, "filter": map[string]any{"status": "open", "created": map[string]any{"gte": 10}, "tags": []any{"a", "b"}},
		"raw": "a/b?c:d&e", "plain": "a/b?c:d&e", "n": 1e21, "ids": []any{3, 4},
	})
	want := "/q?form=blue,black,brown&pipes=blue|black|brown&spaces=B%20150%20G%20200%20R%20100" +
		"&x=1%202&y=true&packed=B,150,G,200,R,100" +
		"&filter[created][gte]=10&filter[status]=open&filter[tags][0]=a&filter[tags][1]=b" +
		"&raw=a/b?c:d%26e&plain=a%2Fb%3Fc%3Ad%26e&n=1000000000000000000000&ids[0]=3&ids[1]=4"
	if got := rec.last(t).RequestURI; got != want {
		t.Errorf("query\n got %s\nwant %s", got, want)
	}

	mustCall(t, a, def, "st", "headers", map[string]any{
		"X_Obj": obj, "X_Objx": obj, "X_Num": 7,
		"c_arr": arr, "c_exp": []any{"x", "y"}, "c_obj": map[string]any{"k": "v w"}, "c_str": "semi;colon",
	})
	req := rec.last(t)
	for h, want := range map[string]string{"X-Obj": "B,150,G,200,R,100", "X-Objx": "B=150,G=200,R=100", "X-Num": "7"} {
		if got := req.Header.Get(h); got != want {
			t.Errorf("%s = %q, want %q", h, got, want)
		}
	}
	if got, want := req.Header.Get("Cookie"), "c_arr=blue,black,brown; c_exp=x; c_exp=y; c_obj=k,v%20w; c_str=semi%3Bcolon"; got != want {
		t.Errorf("cookie\n got %s\nwant %s", got, want)
	}
}

func TestCookieParamsFixture(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	def := fixture(t, "cookie-params-3.0.json")
	a := New(Options{})
	// The operation requires the undefined scheme "OpenID": no credentials
	// are sent, whatever secrets are set.
	hydrate(t, a, "cp", def, map[string]any{"serverUrl": rec.URL + "/rest"}, map[string]any{
		"BasicAuth": map[string]any{"username": "u", "password": "p"}, "BearerAuth": "tok", "ApiKeyAuth": "key",
	})
	tool := "post_getTimeAfterJson_time"
	in := decodeJSON(t, toolByID(t, def, tool).InputSchema)
	if req := in["required"].([]any); !reflect.DeepEqual(req, []any{"time", "debug", "csrftoken"}) {
		t.Errorf("required %v", req)
	}
	mustCall(t, a, def, "cp", tool, map[string]any{
		"time": 1500, "debug": 1, "csrftoken": "abc",
		"body": map[string]any{"bool1": true, "timetype": "milliseconds", "int": 3},
	})
	req := rec.last(t)
	if req.Method != "POST" || req.RequestURI != "/rest/getTimeAfterJson/1500" {
		t.Errorf("%s %s", req.Method, req.RequestURI)
	}
	if got := req.Header.Get("Cookie"); got != "debug=1; csrftoken=abc" {
		t.Errorf("cookie %q", got)
	}
	if string(req.Body) != `{"bool1":true,"int":3,"timetype":"milliseconds"}` {
		t.Errorf("body %s", req.Body)
	}
	for _, h := range []string{"Authorization", "X-Api-Key"} {
		if v := req.Header.Get(h); v != "" {
			t.Errorf("%s sent: %q", h, v)
		}
	}
}

func TestStripeFormAndAuth(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	def := fixture(t, "stripe-2022-04-3.0.json")
	a := New(Options{})
	hydrate(t, a, "stripe", def, map[string]any{"serverUrl": rec.URL}, map[string]any{"bearerAuth": "sk_test_123"})

	mustCall(t, a, def, "stripe", "PostCustomers", map[string]any{"body": map[string]any{
		"name":     "Jo Doe",
		"address":  map[string]any{"city": "Paris", "line1": "1 rue & co"},
		"metadata": map[string]any{"order": "6735"},
		"expand":   []any{"tax", "sources"},
		"tax_id_data": []any{
			map[string]any{"type": "eu_vat", "value": "FR123"},
		},
		"balance": -100,
	}})
	req := rec.last(t)
	want := "address[city]=Paris&address[line1]=1%20rue%20%26%20co&balance=-100&expand[0]=tax&expand[1]=sources" +
		"&metadata[order]=6735&name=Jo%20Doe&tax_id_data[0][type]=eu_vat&tax_id_data[0][value]=FR123"
	if req.Method != "POST" || req.RequestURI != "/v1/customers" || string(req.Body) != want {
		t.Errorf("%s %s\n got %s\nwant %s", req.Method, req.RequestURI, req.Body, want)
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-www-form-urlencoded" {
		t.Errorf("content type %q", ct)
	}
	// Document-level security [basicAuth] | [bearerAuth]: only bearer is set.
	if got := req.Header.Get("Authorization"); got != "Bearer sk_test_123" {
		t.Errorf("authorization %q", got)
	}
	// The form is what a form parser reads back.
	form, err := url.ParseQuery(string(req.Body))
	if err != nil || form.Get("address[line1]") != "1 rue & co" || form.Get("name") != "Jo Doe" {
		t.Errorf("parsed %v %v", form, err)
	}

	// deepObject query parameters.
	mustCall(t, a, def, "stripe", "GetCustomers", map[string]any{
		"created": map[string]any{"gte": 1600000000, "lt": 1700000000}, "expand": []any{"data.tax"}, "limit": 3,
	})
	if got, want := rec.last(t).RequestURI, "/v1/customers?created[gte]=1600000000&created[lt]=1700000000&expand[0]=data.tax&limit=3"; got != want {
		t.Errorf("query\n got %s\nwant %s", got, want)
	}

	// With both secrets, the first requirement (basic) wins.
	hydrate(t, a, "stripe", def, map[string]any{"serverUrl": rec.URL}, map[string]any{
		"bearerAuth": "sk_test_123", "basicAuth": map[string]any{"username": "sk_test_456", "password": ""},
	})
	mustCall(t, a, def, "stripe", "GetBalance", nil)
	if got := rec.last(t).Header.Get("Authorization"); got != "Basic "+base64.StdEncoding.EncodeToString([]byte("sk_test_456:")) {
		t.Errorf("basic %q", got)
	}
}

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

func TestInvokeFailures(t *testing.T) {
	t.Parallel()
	def := fixture(t, "petstore-3.0.yaml")
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow/pets":
			<-r.Context().Done() // answers only when the client gives up
		case "/big/pets":
			_, _ = w.Write(bytes.Repeat([]byte("x"), 2048))
		default:
			_, _ = io.WriteString(w, "[]")
		}
	})
	a := New(Options{MaxResponseBytes: 1024})

	// Timeout from config.
	hydrate(t, a, "slow", def, map[string]any{"serverUrl": rec.URL + "/slow", "timeoutMs": 50}, nil)
	_, err := call(t, a, def, "slow", "listPets", nil)
	if err == nil || !strings.Contains(err.Error(), "GET "+rec.URL+"/slow/pets: timed out after 50ms") || !errors.Is(err, context.DeadlineExceeded) || toolErrorOf(err).Code != module.ToolTransportError {
		t.Errorf("timeout: %v", err)
	}
	rec.last(t)
	// The caller's own cancellation is reported as such.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.Invoke(ctx, module.InvokeInput{ServiceID: "slow", ToolID: "listPets"}); !errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "timed out") {
		t.Errorf("canceled: %v", err)
	}

	// Oversize response.
	hydrate(t, a, "big", def, map[string]any{"serverUrl": rec.URL + "/big"}, nil)
	if _, err := call(t, a, def, "big", "listPets", nil); err == nil || !strings.Contains(err.Error(), "response body larger than the 1024-byte limit") ||
		toolErrorOf(err).Code != module.ToolUpstreamError || toolErrorOf(err).Status != 200 {
		t.Errorf("oversize: %v %+v", err, toolErrorOf(err))
	}
	rec.last(t)

	// Transport error; the API key in the query is not in the message.
	sec := defineDoc(t, securityDoc)
	hydrate(t, a, "dead", sec, map[string]any{"serverUrl": rec.URL + "/dead"}, map[string]any{"qKey": "SECRET-KEY"})
	rec.Close()
	_, err = call(t, a, sec, "dead", "q", map[string]any{"a": "1"})
	if err == nil || !strings.HasPrefix(err.Error(), "GET "+rec.URL+"/dead/q: ") || !strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "SECRET") ||
		toolErrorOf(err).Code != module.ToolTransportError {
		t.Errorf("transport: %v", err)
	}

	// Unknown service and tool, forgotten service.
	ctx = context.Background()
	if _, err := a.Invoke(ctx, module.InvokeInput{ServiceID: "nope", ToolID: "x"}); err == nil || !strings.Contains(err.Error(), `service "nope" is not loaded`) {
		t.Errorf("unknown service: %v", err)
	}
	if _, err := a.Invoke(ctx, module.InvokeInput{ServiceID: "big", ToolID: "nope"}); err == nil || !strings.Contains(err.Error(), `has no tool "nope"`) {
		t.Errorf("unknown tool: %v", err)
	}
	if _, err := a.Invoke(ctx, module.InvokeInput{ServiceID: "big", ToolID: "showPetById"}); err == nil || !strings.Contains(err.Error(), `missing path parameter "petId"`) || toolErrorOf(err).Code != module.ToolInvalidParameters {
		t.Errorf("missing path parameter: %v", err)
	}
	if err := a.Forget(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Invoke(ctx, module.InvokeInput{ServiceID: "big", ToolID: "listPets"}); err == nil || !strings.Contains(err.Error(), "not loaded") {
		t.Errorf("forgotten: %v", err)
	}
	// Bad state is refused at Hydrate.
	if err := a.Hydrate(ctx, adapters.ServiceState{ID: "bad", AdapterDomain: json.RawMessage(`[`)}); err == nil {
		t.Error("bad domain accepted")
	}
	if err := a.Hydrate(ctx, adapters.ServiceState{ID: "bad", Config: map[string]any{"timeoutMs": -1}}); err == nil {
		t.Error("bad timeout accepted")
	}
}

func TestNonJSONParameters(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	def := defineDoc(t, stylesDoc)
	a := New(Options{})
	hydrate(t, a, "st", def, map[string]any{"serverUrl": rec.URL}, nil)
	// Typed Go values (as a Go caller might pass) serialise like their JSON.
	_, err := a.Invoke(context.Background(), module.InvokeInput{ServiceID: "st", ToolID: "query", Parameters: map[string]any{
		"form": []string{"a", "b"}, "flat": map[string]int{"x": 1}, "n": int64(3),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if got := rec.last(t).RequestURI; got != "/q?form=a,b&x=1&n=3" {
		t.Errorf("%s", got)
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "{}") })
	go func() {
		for range rec.reqs { // drain: this test checks races, not the wire
		}
	}()
	def := fixture(t, "petstore-3.0.yaml")
	a := New(Options{})
	hydrate(t, a, "pets", def, map[string]any{"serverUrl": rec.URL}, nil)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10 {
				if i%4 == 0 {
					hydrate(t, a, "pets", def, map[string]any{"serverUrl": rec.URL}, nil)
					continue
				}
				if _, err := a.Invoke(context.Background(), module.InvokeInput{ServiceID: "pets", ToolID: "listPets", Parameters: map[string]any{"limit": 1.0}}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

func TestInfo(t *testing.T) {
	t.Parallel()
	a := New(Options{})
	info := a.Info()
	if info.ID != "openapi" || info.Type != module.TypeAdapter || info.Version == "" || info.Name == "" || info.Description == "" {
		t.Errorf("%+v", info)
	}
	for _, s := range []json.RawMessage{info.ConfigSchema, info.SecretsSchema} {
		if err := validate(t, s, map[string]any{}); err != nil {
			t.Error(err)
		}
	}
	if err := a.Setup(context.Background()); err != nil {
		t.Error(err)
	}
	if err := a.Teardown(context.Background()); err != nil {
		t.Error(err)
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

// toolErrorOf is the module.ToolError in err (a zero one when there is none).
func toolErrorOf(err error) module.ToolError {
	var te *module.ToolError
	if errors.As(err, &te) {
		return *te
	}
	return module.ToolError{}
}

// TestDotSegmentsAreEncoded: a path parameter of "." or ".." reaches the
// upstream percent-encoded, never as a dot segment a server or proxy would
// resolve (GET /v1/pets/.. is GET /v1/); dots inside a value stay as they are.
func TestDotSegmentsAreEncoded(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t, nil)
	def := fixture(t, "petstore-3.0.yaml")
	a := New(Options{})
	hydrate(t, a, "pets", def, map[string]any{"serverUrl": rec.URL + "/v1/"}, nil)
	for value, want := range map[string]string{
		"..":   "/v1/pets/%2E%2E",
		".":    "/v1/pets/%2E",
		"...":  "/v1/pets/%2E%2E%2E",
		"a..b": "/v1/pets/a..b", // control: not a dot segment
		"..a":  "/v1/pets/..a",
	} {
		mustCall(t, a, def, "pets", "showPetById", map[string]any{"petId": value})
		if got := rec.last(t).RequestURI; got != want {
			t.Errorf("petId %q reached the upstream as %s, want %s", value, got, want)
		}
	}
}
