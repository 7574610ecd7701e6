package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/session"
)

// TestSpecEnumsMatchTheAPI: exitState and reason list null (the API returns
// it before a first run) and reason lists exactly the module contract's
// reasons, in both renderings.
func TestSpecEnumsMatchTheAPI(t *testing.T) {
	t.Parallel()
	want := []any{}
	for _, r := range module.Reasons {
		want = append(want, string(r))
	}
	want = append(want, nil)
	for _, v30 := range []bool{false, true} {
		raw, err := Spec("json", v30)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Components struct {
				Schemas map[string]struct {
					Properties map[string]struct {
						Enum []any `json:"enum"`
					} `json:"properties"`
				} `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"Process", "ProcessSummary", "ExitEvent"} {
			props := doc.Components.Schemas[name].Properties
			if got := props["reason"].Enum; !slices.Equal(got, want) {
				t.Errorf("3.0=%v %s.reason enum %v, want %v", v30, name, got, want)
			}
			if got := props["exitState"].Enum; !slices.Contains(got, any(nil)) || !slices.Contains(got, any("timeout")) {
				t.Errorf("3.0=%v %s.exitState enum %v lacks null", v30, name, got)
			}
		}
	}
}

// TestServed30IsOpenAPI30: /openapi-3.0.json and the committed rendering are
// the same document, which carries none of the JSON Schema 2020-12 words
// OpenAPI 3.0 lacks (Redocly's lint, make openapi-lint, is the full check),
// names a server and models the event stream as text, not an array.
func TestServed30IsOpenAPI30(t *testing.T) {
	t.Parallel()
	r, _ := New(Deps{})
	rec := httptest.NewRecorder()
	r.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/openapi-3.0.json", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /openapi-3.0.json: %d %s", rec.Code, rec.Body)
	}
	committed, err := Spec("json", true)
	if err != nil {
		t.Fatal(err)
	}
	var served, want any
	if err := json.Unmarshal(rec.Body.Bytes(), &served); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(committed, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(served, want) {
		t.Error("the served 3.0 document differs from Spec(json, true)")
	}
	body := rec.Body.String()
	for _, bad := range []string{`"const"`, `"contentMediaType"`, `"format":"base64"`} {
		if strings.Contains(body, bad) {
			t.Errorf("the 3.0 document carries %s", bad)
		}
	}
	var doc struct {
		Servers []struct{ URL string }
		Paths   map[string]map[string]struct {
			Responses map[string]struct {
				Content map[string]struct{ Schema map[string]any }
			}
		}
	}
	if err := json.Unmarshal(committed, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Servers) != 1 || doc.Servers[0].URL != DefaultServer {
		t.Errorf("servers %v, want %s", doc.Servers, DefaultServer)
	}
	if s := doc.Paths["/processes/{pid}/events"]["get"].Responses["200"].Content["text/event-stream"].Schema; s["type"] != "string" {
		t.Errorf("event stream schema %v, want a string", s)
	}
}

// TestSpecCarriesExamplesAndEnforcedMaxima: every path parameter has an
// example (test runners such as Dredd send it), and the duration fields
// carry the maxima the domain enforces.
func TestSpecCarriesExamplesAndEnforcedMaxima(t *testing.T) {
	t.Parallel()
	raw, err := Spec("json", false)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name, In string
				Example  any
			}
		}
		Components struct {
			Schemas map[string]struct {
				Properties map[string]struct {
					Maximum *float64 `json:"maximum"`
				}
			}
		}
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	n := 0
	for path, ops := range doc.Paths {
		for method, op := range ops {
			for _, p := range op.Parameters {
				if p.In == "path" {
					n++
					if p.Example == nil {
						t.Errorf("%s %s: path parameter %s has no example", method, path, p.Name)
					}
				}
			}
		}
	}
	if n < 40 {
		t.Errorf("only %d path parameters seen", n)
	}
	for _, c := range []struct {
		schema, field string
		want          int64
	}{
		{"CreateProcessInputBody", "timeoutMs", process.DefaultLimits().MaxTimeoutMs},
		{"CreateSessionInputBody", "idleTimeoutMs", session.MaxDurationMs},
		{"CreateSessionInputBody", "maxLifetimeMs", session.MaxDurationMs},
	} {
		got := doc.Components.Schemas[c.schema].Properties[c.field].Maximum
		if got == nil || int64(*got) != c.want {
			t.Errorf("%s.%s maximum %v, want the enforced %d", c.schema, c.field, got, c.want)
		}
	}
}
