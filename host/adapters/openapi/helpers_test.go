package openapi

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/adapters"
	"github.com/cyrnel/cyrnel/host/schema"
)

// fixtureDir holds real public OpenAPI documents (sources in SOURCES.md).
func fixtureDir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test file")
	}
	dir := filepath.Join(filepath.Dir(file), "testdata")
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	return dir
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtureDir(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

type fixtureResult struct {
	once sync.Once
	def  adapters.ServiceDefinition
	err  error
}

var fixtureCache sync.Map // file name → *fixtureResult

// fixture imports a fixture document once per test binary: the large ones
// take a second or more each.
func fixture(t testing.TB, name string) adapters.ServiceDefinition {
	t.Helper()
	v, _ := fixtureCache.LoadOrStore(name, &fixtureResult{})
	r := v.(*fixtureResult)
	r.once.Do(func() {
		data, err := os.ReadFile(filepath.Join(fixtureDir(t), name))
		if err != nil {
			r.err = err
			return
		}
		r.def, r.err = New(Options{}).Definition(context.Background(), adapters.Source{Content: string(data)})
	})
	if r.err != nil {
		t.Fatalf("%s: %v", name, r.err)
	}
	return r.def
}

func defineDoc(t testing.TB, doc string) adapters.ServiceDefinition {
	t.Helper()
	def, err := New(Options{}).Definition(context.Background(), adapters.Source{Content: doc})
	if err != nil {
		t.Fatalf("definition: %v", err)
	}
	return def
}

func toolByID(t testing.TB, def adapters.ServiceDefinition, id string) adapters.ToolDefinition {
	t.Helper()
	for _, tl := range def.Tools {
		if tl.ID == id {
			return tl
		}
	}
	var ids []string
	for _, tl := range def.Tools {
		ids = append(ids, tl.ID)
	}
	t.Fatalf("no tool %q; have %v", id, ids)
	return adapters.ToolDefinition{}
}

func decodeJSON(t testing.TB, raw []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%v in %s", err, raw)
	}
	return m
}

// validate checks v against a schema the way the host does.
func validate(t testing.TB, sch json.RawMessage, v any) error {
	t.Helper()
	s, err := schema.Compile(sch)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	return s.Validate(v)
}

// recorded is one request as the server saw it on the wire.
type recorded struct {
	Method     string
	RequestURI string // raw path and query
	Header     http.Header
	Body       []byte
}

// recorder is a loopback HTTP server that records every request and answers
// with respond (default: 200 {"ok":true}).
type recorder struct {
	*httptest.Server
	reqs chan recorded
}

func newRecorder(t testing.TB, respond http.HandlerFunc) *recorder {
	t.Helper()
	rec := &recorder{reqs: make(chan recorded, 16)}
	rec.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec.reqs <- recorded{Method: r.Method, RequestURI: r.RequestURI, Header: r.Header.Clone(), Body: body}
		if respond != nil {
			respond(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(rec.Close)
	return rec
}

// last returns the request the server recorded for the call just made.
func (r *recorder) last(t testing.TB) recorded {
	t.Helper()
	select {
	case req := <-r.reqs:
		return req
	default:
		t.Fatal("the server received no request")
		return recorded{}
	}
}

// privateOK is the config of a service whose upstream is a mock on loopback.
var privateOK = map[string]any{"allowPrivateNetwork": true}

// hydrate hydrates def as service id, after checking config and secrets
// against the definition's schemas as the host does. The mock upstreams are
// on loopback, so allowPrivateNetwork defaults to true here.
func hydrate(t testing.TB, a *Adapter, id string, def adapters.ServiceDefinition, config, secrets map[string]any) {
	t.Helper()
	config = maps.Clone(config)
	if config == nil {
		config = map[string]any{}
	}
	if _, ok := config["allowPrivateNetwork"]; !ok {
		config["allowPrivateNetwork"] = true
	}
	if secrets == nil {
		secrets = map[string]any{}
	}
	if err := validate(t, def.ConfigSchema, config); err != nil {
		t.Fatalf("config: %v", err)
	}
	if err := validate(t, def.SecretsSchema, secrets); err != nil {
		t.Fatalf("secrets: %v", err)
	}
	tools := map[string]json.RawMessage{}
	for _, tl := range def.Tools {
		tools[tl.ID] = tl.AdapterDomain
	}
	if err := a.Hydrate(context.Background(), adapters.ServiceState{
		ID: id, AdapterDomain: def.AdapterDomain, Tools: tools, Config: config, Secrets: secrets,
	}); err != nil {
		t.Fatal(err)
	}
}

// call validates params against the tool's input schema (as the host does)
// and invokes it.
func call(t testing.TB, a *Adapter, def adapters.ServiceDefinition, svc, tool string, params map[string]any) (map[string]any, error) {
	t.Helper()
	if params == nil {
		params = map[string]any{}
	}
	// Round-trip through JSON: the host hands over decoded JSON.
	raw, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	var decoded map[string]any
	if err := json.Unmarshal(raw, &decoded); err != nil {
		t.Fatal(err)
	}
	if err := validate(t, toolByID(t, def, tool).InputSchema, decoded); err != nil {
		t.Fatalf("parameters of %s: %v", tool, err)
	}
	res, err := a.Invoke(context.Background(), module.InvokeInput{ServiceID: svc, ToolID: tool, Parameters: decoded})
	if err != nil {
		return nil, err
	}
	return res.(map[string]any), nil
}

func mustCall(t testing.TB, a *Adapter, def adapters.ServiceDefinition, svc, tool string, params map[string]any) map[string]any {
	t.Helper()
	res, err := call(t, a, def, svc, tool, params)
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	return res
}
