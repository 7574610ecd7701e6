package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

func mustCompile(t *testing.T, s string) *Schema {
	t.Helper()
	sch, err := Compile(json.RawMessage(s))
	if err != nil {
		t.Fatalf("compile %s: %v", s, err)
	}
	return sch
}

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func problemsOf(t *testing.T, err error) []Problem {
	t.Helper()
	var ve *ValidationError
	if !errors.As(err, &ve) {
		t.Fatalf("want *ValidationError, got %T %v", err, err)
	}
	return ve.Problems
}

const toolSchema = `{
  "type": "object",
  "additionalProperties": false,
  "required": ["petId", "body"],
  "properties": {
    "petId": {"type": "integer", "minimum": 1},
    "tags": {"type": "array", "items": {"type": "string"}},
    "body": {"$ref": "#/$defs/Pet"}
  },
  "$defs": {
    "Pet": {
      "type": "object",
      "required": ["name"],
      "properties": {
        "name": {"type": "string"},
        "children": {"type": "array", "items": {"$ref": "#/$defs/Pet"}}
      }
    }
  }
}`

func TestValidateNamesEveryFailingPath(t *testing.T) {
	t.Parallel()
	s := mustCompile(t, toolSchema)
	if err := s.Validate(decode(t, `{"petId": 3, "body": {"name": "rex", "children": [{"name": "a"}]}}`)); err != nil {
		t.Fatalf("valid value rejected: %v", err)
	}
	err := s.Validate(decode(t, `{"petId": 0, "tags": ["a", 2], "extra": 1, "other": 2,
		"body": {"children": [{"name": 5}, {}]}}`))
	got := problemsOf(t, err)
	want := []string{
		"/body/children/0/name",
		"/body/children/1/name",
		"/body/name",
		"/extra",
		"/other",
		"/petId",
		"/tags/1",
	}
	var paths []string
	for _, p := range got {
		paths = append(paths, p.Path)
		if p.Message == "" {
			t.Errorf("empty message at %s", p.Path)
		}
	}
	if !reflect.DeepEqual(paths, want) {
		t.Fatalf("paths = %v\nwant    %v\n(%v)", paths, want, err)
	}
	for _, p := range got {
		switch p.Path {
		case "/body/name", "/body/children/1/name":
			if p.Message != "missing required property" {
				t.Errorf("%s: %q", p.Path, p.Message)
			}
		case "/extra":
			if p.Message != "property not allowed" {
				t.Errorf("%s: %q", p.Path, p.Message)
			}
		}
	}
	if !strings.Contains(err.Error(), "/petId: ") || !strings.HasPrefix(err.Error(), "validation failed: ") {
		t.Errorf("message %q", err.Error())
	}
}

func TestRootProblem(t *testing.T) {
	t.Parallel()
	err := mustCompile(t, `{"type":"object"}`).Validate("x")
	got := problemsOf(t, err)
	if len(got) != 1 || got[0].Path != "" || !strings.Contains(err.Error(), "(root): ") {
		t.Fatalf("%v", err)
	}
}

func TestPathEscaping(t *testing.T) {
	t.Parallel()
	s := mustCompile(t, `{"properties": {"a/b": {"properties": {"c~d": {"type": "string"}}}}}`)
	got := problemsOf(t, s.Validate(decode(t, `{"a/b": {"c~d": 1}}`)))
	if len(got) != 1 || got[0].Path != "/a~1b/c~0d" {
		t.Fatalf("%+v", got)
	}
}

func TestNumbers(t *testing.T) {
	t.Parallel()
	s := mustCompile(t, `{"type":"object","properties":{"n":{"type":"integer","maximum":10},"f":{"type":"number","exclusiveMinimum":0}}}`)
	for _, v := range []any{
		map[string]any{"n": float64(3), "f": 0.5},
		map[string]any{"n": json.Number("3"), "f": json.Number("1e-3")},
		map[string]any{"n": 3, "f": float32(2)},
		map[string]any{"n": int64(10), "f": uint8(1)},
		map[string]any{"n": 3.0},
	} {
		if err := s.Validate(v); err != nil {
			t.Errorf("%#v: %v", v, err)
		}
	}
	for _, v := range []any{
		map[string]any{"n": 3.5},
		map[string]any{"n": json.Number("11")},
		map[string]any{"f": 0.0},
		map[string]any{"n": "3"},
	} {
		if err := s.Validate(v); err == nil {
			t.Errorf("%#v accepted", v)
		}
	}
	// Integers past float64 precision keep their exact value through
	// ValidateJSON.
	big := mustCompile(t, `{"type":"integer","maximum":9007199254740993}`)
	if err := big.ValidateJSON([]byte(`9007199254740993`)); err != nil {
		t.Error(err)
	}
	if err := big.ValidateJSON([]byte(`9007199254740994`)); err == nil {
		t.Error("9007199254740994 accepted")
	}
}

func TestNonJSONGoValues(t *testing.T) {
	t.Parallel()
	s := mustCompile(t, `{"type":"object","properties":{"m":{"type":"object","additionalProperties":{"type":"string"}},"l":{"type":"array","items":{"type":"integer"}}}}`)
	type item struct {
		M map[string]string `json:"m"`
		L []int             `json:"l"`
	}
	if err := s.Validate(item{M: map[string]string{"a": "b"}, L: []int{1, 2}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(map[string]any{"l": []string{"x"}}); err == nil {
		t.Fatal("[]string accepted as integers")
	}
	if err := s.Validate(map[string]any{"f": func() {}}); err == nil || errors.As(err, new(*ValidationError)) {
		t.Fatalf("func value: %v", err)
	}
}

func TestDrafts(t *testing.T) {
	t.Parallel()
	// Default is 2020-12: prefixItems applies.
	s := mustCompile(t, `{"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"integer"}}`)
	if err := s.Validate([]any{"a", 1.0}); err != nil {
		t.Error(err)
	}
	if err := s.Validate([]any{1.0, 1.0}); err == nil {
		t.Error("prefixItems ignored")
	}
	// draft-07 with definitions.
	s = mustCompile(t, `{"$schema":"http://json-schema.org/draft-07/schema#","definitions":{"n":{"type":"number"}},"items":{"$ref":"#/definitions/n"}}`)
	if err := s.Validate([]any{"x"}); err == nil {
		t.Error("draft-07 $ref ignored")
	}
	// draft-04 boolean exclusiveMinimum.
	s = mustCompile(t, `{"$schema":"http://json-schema.org/draft-04/schema#","type":"number","minimum":1,"exclusiveMinimum":true}`)
	if err := s.Validate(1.0); err == nil {
		t.Error("draft-04 exclusiveMinimum ignored")
	}
	if err := s.Validate(1.5); err != nil {
		t.Error(err)
	}
	// The same keyword is invalid in 2020-12.
	if _, err := Compile(json.RawMessage(`{"type":"number","exclusiveMinimum":true}`)); err == nil {
		t.Error("boolean exclusiveMinimum accepted in 2020-12")
	}
}

func TestExternalRefsRefused(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, `{"type":"string"}`)
	}))
	defer srv.Close()
	for _, s := range []string{
		`{"$ref":"` + srv.URL + `/s.json"}`,
		`{"properties":{"a":{"$ref":"` + srv.URL + `/s.json#/x"}}}`,
		`{"$ref":"file:///etc/passwd"}`,
		`{"$ref":"other.json"}`,
		`{"$schema":"` + srv.URL + `/meta"}`,
		`{"$defs":{"x":{"$ref":"https://example.com/x.json"}}}`,
	} {
		_, err := Compile(json.RawMessage(s))
		if err == nil {
			t.Errorf("%s compiled", s)
			continue
		}
		if !errors.Is(err, ErrExternalRef) || !strings.Contains(err.Error(), "not allowed") {
			t.Errorf("%s: %v", s, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("server fetched %d times", n)
	}
	// An $id names the schema; references to it stay inside.
	s := mustCompile(t, `{"$id":"https://example.com/root","$defs":{"a":{"$anchor":"x","type":"string"}},"$ref":"https://example.com/root#x"}`)
	if err := s.Validate(1.0); err == nil {
		t.Error("anchor ref ignored")
	}
}

func TestCompileErrors(t *testing.T) {
	t.Parallel()
	for _, s := range []string{`{"type":5}`, `{`, `{"pattern":"(("}`, `{"$ref":"#/$defs/missing"}`} {
		if _, err := Compile(json.RawMessage(s)); err == nil || !strings.HasPrefix(err.Error(), "compile schema: ") {
			t.Errorf("%s: %v", s, err)
		}
	}
}

func TestECMAScriptPattern(t *testing.T) {
	t.Parallel()
	// Negative lookahead: not RE2, so it runs on the ECMAScript engine.
	s := mustCompile(t, `{"type":"string","pattern":"^(?!internal-)[a-z-]+$"}`)
	if err := s.Validate("public-x"); err != nil {
		t.Error(err)
	}
	if err := s.Validate("internal-x"); err == nil {
		t.Error("lookahead ignored")
	}
}

func TestCacheBounded(t *testing.T) {
	t.Parallel()
	c := NewCompiler(2)
	a1, err := c.Compile(json.RawMessage(`{"type":"string"}`))
	if err != nil {
		t.Fatal(err)
	}
	a2, _ := c.Compile(json.RawMessage(`{"type":"string"}`))
	if a1 != a2 {
		t.Error("identical schema compiled twice")
	}
	_, _ = c.Compile(json.RawMessage(`{"type":"number"}`))
	_, _ = c.Compile(json.RawMessage(`{"type":"string"}`)) // a is now most recent
	_, _ = c.Compile(json.RawMessage(`{"type":"boolean"}`))
	if c.Len() != 2 {
		t.Fatalf("len %d", c.Len())
	}
	if a3, _ := c.Compile(json.RawMessage(`{"type":"string"}`)); a3 != a1 {
		t.Error("most recently used schema was evicted")
	}
	if _, err := c.Compile(json.RawMessage(`{"type":7}`)); err == nil || c.Len() != 2 {
		t.Error("failed compile cached or accepted")
	}
	off := NewCompiler(0)
	_, _ = off.Compile(json.RawMessage(`{}`))
	if off.Len() != 0 {
		t.Error("disabled cache stored")
	}
}

func TestConcurrentUse(t *testing.T) {
	t.Parallel()
	c := NewCompiler(4)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := c.Compile(json.RawMessage(fmt.Sprintf(`{"type":"integer","maximum":%d}`, i%3)))
			if err != nil {
				t.Error(err)
				return
			}
			for range 50 {
				_ = s.Validate(float64(i))
			}
		}()
	}
	wg.Wait()
}
