package openapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
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
