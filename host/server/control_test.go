package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/cyrnel/cyrnel/host/process"
)

// host is a server on a data directory that outlives it (restarts).
type testHost struct {
	t   *testing.T
	dir string
	s   *Server
	url string
}

func startHost(t *testing.T, dir string) *testHost {
	t.Helper()
	s, err := New(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), Config{
		Addr: "127.0.0.1:0", DataDir: dir, Limits: process.DefaultLimits(), APIKey: "test-key",
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	h := &testHost{t: t, dir: dir, s: s, url: srv.URL}
	t.Cleanup(func() { srv.Close(); s.Close() })
	return h
}

// restart stops the host and starts another on the same data directory.
func (h *testHost) restart() *testHost {
	h.s.Close()
	return startHost(h.t, h.dir)
}

// call sends a JSON request and decodes the JSON answer into out.
func (h *testHost) call(method, path string, body any, out any) int {
	h.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		h.t.Fatal(err)
	}
	req, err := http.NewRequest(method, h.url+path, bytes.NewReader(b))
	if err != nil {
		h.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer test-key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			h.t.Fatalf("%s %s: %v", method, path, err)
		}
	}
	return resp.StatusCode
}

type problem struct {
	Errors []struct {
		Location string `json:"location"`
	} `json:"errors"`
}

func (p problem) names(loc string) bool {
	for _, e := range p.Errors {
		if e.Location == loc {
			return true
		}
	}
	return false
}

// A preload the interpreter cannot import is refused (422 naming it), and
// nothing changes: executions still run, the stored config is as before,
// also after a restart.
func TestUnimportablePreloadIsRefused(t *testing.T) {
	t.Parallel()
	h := startHost(t, t.TempDir())
	var p problem
	if code := h.call(http.MethodPut, "/modules/python/config", map[string]any{"preload": []string{"asyncio", "no_such_module_for_cyrnel"}}, &p); code != 422 || !p.names("body.preload[1]") {
		t.Fatalf("PUT config: %d %+v", code, p)
	}
	run := func(h *testHost) {
		var proc struct {
			ExitState string `json:"exitState"`
			Stdout    string `json:"stdout"`
		}
		if code := h.call(http.MethodPost, "/processes", map[string]any{"code": "print(6*7)", "waitMs": 30000}, &proc); code != 201 || proc.ExitState != "success" || proc.Stdout != "42\n" {
			t.Fatalf("execution after the refusal: %d %+v", code, proc)
		}
	}
	run(h)
	h = h.restart()
	var cfg map[string]any
	if code := h.call(http.MethodGet, "/modules/python/config", nil, &cfg); code != 200 || cfg["preload"] != nil {
		t.Fatalf("stored config after a restart: %d %v", code, cfg)
	}
	run(h)
}

// Config values past the schema's maximums are a 422 naming the field and
// store nothing: a refused import does not exist, also after a restart; a
// refused config change leaves the stored config.
func TestServiceConfigMaximums(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("testdata/petstore-3.0.yaml")
	if err != nil {
		t.Fatal(err)
	}
	h := startHost(t, t.TempDir())
	var p problem
	create := func(id string, timeout any) int {
		p = problem{}
		return h.call(http.MethodPost, "/services", map[string]any{"id": id, "adapter": "openapi", "source": map[string]any{"content": string(doc)},
			"config": map[string]any{"serverUrl": "http://127.0.0.1:9", "timeoutMs": timeout}}, &p)
	}
	if code := create("huge", json.Number("1e300")); code != 422 || !p.names("body.config.timeoutMs") {
		t.Fatalf("create: %d %+v", code, p)
	}
	if code := create("pets", 5000); code != 201 {
		t.Fatalf("create: %d", code)
	}
	p = problem{}
	if code := h.call(http.MethodPut, "/services/pets/config", json.RawMessage(`{"timeoutMs": 9223372036854775808}`), &p); code != 422 || !p.names("body.timeoutMs") {
		t.Fatalf("PUT config: %d %+v", code, p)
	}
	h = h.restart()
	if code := h.call(http.MethodGet, "/services/huge", nil, nil); code != 404 {
		t.Fatalf("refused import after a restart: %d", code)
	}
	var cfg map[string]any
	if code := h.call(http.MethodGet, "/services/pets/config", nil, &cfg); code != 200 || cfg["timeoutMs"] != 5000.0 {
		t.Fatalf("stored config after a restart: %d %v", code, cfg)
	}
}
