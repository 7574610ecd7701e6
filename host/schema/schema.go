// Package schema compiles and applies JSON Schemas: tool input schemas, module
// and service config and secrets schemas. It wraps
// github.com/santhosh-tekuri/jsonschema/v6 with the host's rules: schemas are
// untrusted, so nothing is ever fetched (remote and file references are
// refused); drafts are taken from "$schema", 2020-12 by default; and a
// validation failure lists every failing location, not just the first.
package schema

import (
	"bytes"
	"container/list"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dlclark/regexp2/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// baseURL is the location every compiled schema pretends to live at. A
// relative "$ref" resolves against it to another URL under it, which is
// refused like any other outside reference.
const baseURL = "mem://cyrnel/schema.json"

// DefaultCacheSize is how many compiled schemas the package-level Compile
// keeps.
const DefaultCacheSize = 1024

// patternTimeout bounds one match of an ECMAScript pattern that Go's linear
// regexp engine cannot compile; those run on a backtracking engine.
const patternTimeout = 100 * time.Millisecond

var printer = message.NewPrinter(language.English)

// Schema is a compiled JSON Schema. It is safe for concurrent use.
type Schema struct {
	s *jsonschema.Schema
}

// Problem is one failing location of a validated value.
type Problem struct {
	// Path is a JSON pointer (RFC 6901) into the value, "" for the value
	// itself, e.g. "/body/name".
	Path    string `json:"path"`
	Message string `json:"message"`
}

// ValidationError is returned by Validate when a value does not conform. It
// names every failing location.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("validation failed: ")
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteString("; ")
		}
		if p.Path == "" {
			b.WriteString("(root)")
		} else {
			b.WriteString(p.Path)
		}
		b.WriteString(": ")
		b.WriteString(p.Message)
	}
	return b.String()
}

// ErrExternalRef is wrapped by compile errors of schemas that reference
// something outside themselves.
var ErrExternalRef = errors.New("external references are not allowed")

// refusingLoader is the compiler's only loader: meta-schemas of the known
// drafts are embedded in the library and never reach it, so anything that
// does is an outside reference.
type refusingLoader struct{}

func (refusingLoader) Load(string) (any, error) {
	return nil, ErrExternalRef
}

// checkRefs refuses a schema with a reference to anything but itself (its
// root or a "$id" inside it), even one in a part that is never used: the
// library compiles such parts lazily, so the loader alone would let them
// through until the day they are reached.
func checkRefs(doc any) error {
	base, _ := url.Parse(baseURL)
	ids := map[string]bool{baseURL: true}
	var refs []string
	var walk func(v any, base *url.URL, schemaMap bool)
	walk = func(v any, base *url.URL, schemaMap bool) {
		switch v := v.(type) {
		case []any:
			for _, x := range v {
				walk(x, base, false)
			}
		case map[string]any:
			if schemaMap {
				for _, x := range v {
					walk(x, base, false)
				}
				return
			}
			if id, ok := v["$id"].(string); ok {
				if u, err := base.Parse(id); err == nil {
					u.Fragment = ""
					base = u
					ids[u.String()] = true
				}
			}
			for k, x := range v {
				switch k {
				case "enum", "const", "default", "examples", "example":
					// Data, not schema: a "$ref" in there is just a value.
				case "properties", "patternProperties", "$defs", "definitions", "dependentSchemas":
					walk(x, base, true)
				case "$ref", "$dynamicRef", "$recursiveRef":
					if s, ok := x.(string); ok {
						refs = append(refs, s)
						if u, err := base.Parse(s); err == nil {
							u.Fragment = ""
							refs[len(refs)-1] = u.String()
						}
					}
				default:
					walk(x, base, false)
				}
			}
		}
	}
	walk(doc, base, false)
	for _, r := range refs {
		if !ids[r] {
			return fmt.Errorf("refusing to load %q: %w", r, ErrExternalRef)
		}
	}
	return nil
}

// Compiler compiles schemas and keeps the most recently used ones, keyed by a
// hash of their content, up to a fixed number.
type Compiler struct {
	mu      sync.Mutex
	max     int
	entries map[[32]byte]*list.Element
	order   *list.List // front = most recently used
}

type cacheEntry struct {
	key    [32]byte
	schema *Schema
}

// NewCompiler returns a Compiler that caches at most size schemas (size < 1
// disables the cache).
func NewCompiler(size int) *Compiler {
	return &Compiler{max: size, entries: map[[32]byte]*list.Element{}, order: list.New()}
}

var defaultCompiler = NewCompiler(DefaultCacheSize)

// Compile compiles a schema with the package's shared cache.
func Compile(schema json.RawMessage) (*Schema, error) {
	return defaultCompiler.Compile(schema)
}

// Compile compiles schema, or returns the cached result of an identical one.
func (c *Compiler) Compile(schema json.RawMessage) (*Schema, error) {
	key := sha256.Sum256(schema)
	if s := c.get(key); s != nil {
		return s, nil
	}
	s, err := compile(schema)
	if err != nil {
		return nil, err
	}
	c.put(key, s)
	return s, nil
}

func (c *Compiler) get(key [32]byte) *Schema {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.entries[key]
	if !ok {
		return nil
	}
	c.order.MoveToFront(el)
	return el.Value.(*cacheEntry).schema
}

func (c *Compiler) put(key [32]byte, s *Schema) {
	if c.max < 1 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.entries[key]; ok {
		c.order.MoveToFront(el)
		return
	}
	c.entries[key] = c.order.PushFront(&cacheEntry{key: key, schema: s})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.entries, last.Value.(*cacheEntry).key)
	}
}

// Len reports how many schemas are cached.
func (c *Compiler) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

func compile(raw json.RawMessage) (*Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("compile schema: invalid JSON: %w", err)
	}
	if err := checkRefs(doc); err != nil {
		return nil, fmt.Errorf("compile schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refusingLoader{})
	c.UseRegexpEngine(compilePattern)
	if err := c.AddResource(baseURL, doc); err != nil {
		return nil, fmt.Errorf("compile schema: %w", err)
	}
	s, err := c.Compile(baseURL)
	if err != nil {
		var le *jsonschema.LoadURLError
		if errors.As(err, &le) {
			return nil, fmt.Errorf("compile schema: refusing to load %q: %w", le.URL, ErrExternalRef)
		}
		return nil, fmt.Errorf("compile schema: %w", err)
	}
	return &Schema{s: s}, nil
}

// compilePattern prefers Go's linear-time engine and falls back to an
// ECMAScript one (what JSON Schema patterns are written for: lookaheads,
// backreferences) with a time bound per match.
func compilePattern(p string) (jsonschema.Regexp, error) {
	if re, err := regexp.Compile(p); err == nil {
		return re, nil
	}
	re, err := regexp2.Compile(p, regexp2.ECMAScript)
	if err != nil {
		return nil, err
	}
	re.MatchTimeout = patternTimeout
	return (*ecmaRegexp)(re), nil
}

type ecmaRegexp regexp2.Regexp

// MatchString fails closed: a match that errors (times out) does not match.
func (re *ecmaRegexp) MatchString(s string) bool {
	ok, err := (*regexp2.Regexp)(re).MatchString(s)
	return err == nil && ok
}

func (re *ecmaRegexp) String() string { return (*regexp2.Regexp)(re).String() }

// Validate checks v, a decoded JSON value. Values decoded by encoding/json
// (map[string]any, []any, string, float64 or json.Number, bool, nil) are
// used as they are; anything else is converted through JSON first.
func (s *Schema) Validate(v any) error {
	v, err := normalize(v)
	if err != nil {
		return err
	}
	err = s.s.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return fmt.Errorf("validate: %w", err)
	}
	return &ValidationError{Problems: problems(ve)}
}

// ValidateJSON decodes data (keeping numbers exact) and validates it.
func (s *Schema) ValidateJSON(data []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("validate: invalid JSON: %w", err)
	}
	return s.Validate(v)
}

// normalize returns v in the shapes the validator understands, converting
// other Go values (structs, typed maps and slices) through JSON so that, for
// instance, a map[string]string validates like the object it encodes.
func normalize(v any) (any, error) {
	if isJSONValue(v) {
		return v, nil
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("validate: value is not JSON: %w", err)
	}
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("validate: %w", err)
	}
	return out, nil
}

func isJSONValue(v any) bool {
	switch v := v.(type) {
	case nil, bool, string, float64, json.Number,
		float32, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return true
	case map[string]any:
		for _, x := range v {
			if !isJSONValue(x) {
				return false
			}
		}
		return true
	case []any:
		for _, x := range v {
			if !isJSONValue(x) {
				return false
			}
		}
		return true
	}
	return false
}

// problems flattens the library's error tree to its leaves: the causes that
// explain themselves. Missing and unexpected properties are reported at the
// property's own path, so every failing path is named.
func problems(root *jsonschema.ValidationError) []Problem {
	var out []Problem
	seen := map[Problem]bool{}
	add := func(p Problem) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			for _, m := range k.Missing {
				add(Problem{Path: child(e.InstanceLocation, m), Message: "missing required property"})
			}
		case *kind.AdditionalProperties:
			for _, m := range k.Properties {
				add(Problem{Path: child(e.InstanceLocation, m), Message: "property not allowed"})
			}
		default:
			add(Problem{Path: pointer(e.InstanceLocation), Message: e.ErrorKind.LocalizedString(printer)})
		}
	}
	walk(root)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].Message < out[j].Message
	})
	return out
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// child is the pointer of property name under the location loc.
func child(loc []string, name string) string {
	return pointer(loc) + "/" + pointerEscaper.Replace(name)
}

func pointer(tokens []string) string {
	var b strings.Builder
	for _, t := range tokens {
		b.WriteByte('/')
		b.WriteString(pointerEscaper.Replace(t))
	}
	return b.String()
}
