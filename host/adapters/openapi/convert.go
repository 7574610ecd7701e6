package openapi

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// direction says which side of the wire a schema describes: OpenAPI's
// readOnly properties are not required in requests, writeOnly ones not in
// responses.
type direction int

const (
	request direction = iota
	response
)

const componentSchemaPrefix = "#/components/schemas/"

// converter turns kin-openapi schemas into JSON Schema 2020-12. Every "$ref"
// becomes a reference into "$defs", and each referenced schema is converted
// once per document and direction and shared by every tool that uses it;
// cycles are harmless because a reference is emitted before its target is
// converted.
type converter struct {
	doc  *openapi3.T
	dir  direction
	is31 bool

	defs    map[string]*convertedDef // by def name
	names   map[string]string        // $ref → def name
	pending []pendingDef
	err     error
}

type convertedDef struct {
	raw  json.RawMessage
	deps []string // def names it references directly
}

type pendingDef struct {
	name   string
	target *openapi3.SchemaRef
}

func newConverter(doc *openapi3.T, dir direction) *converter {
	return &converter{
		doc:   doc,
		dir:   dir,
		is31:  doc.IsOpenAPI31OrLater(),
		defs:  map[string]*convertedDef{},
		names: map[string]string{},
	}
}

// deps collects the def names a schema references directly.
type deps map[string]bool

// schema converts sr. It returns a JSON Schema value (an object or a
// boolean) and adds the defs it references to d.
func (c *converter) schema(sr *openapi3.SchemaRef, d deps) any {
	if sr == nil {
		return map[string]any{}
	}
	if sr.Ref != "" {
		return c.ref(sr, d)
	}
	if sr.Value == nil {
		return map[string]any{}
	}
	return c.inline(sr.Value, d)
}

// ref emits a reference to the def for sr.Ref. In OpenAPI 3.1 the keywords
// next to a $ref apply too; kin-openapi merges them into a copy of the
// target, so what differs from the target is put back next to the $ref.
func (c *converter) ref(sr *openapi3.SchemaRef, d deps) any {
	name, target := c.def(sr)
	d[name] = true
	out := map[string]any{"$ref": "#/$defs/" + name}
	if !c.is31 || target == nil || target.Value == nil || sr.Value == nil || sr.Value == target.Value {
		return out
	}
	v, t := sr.Value, target.Value
	if v.Title != t.Title && v.Title != "" {
		out["title"] = v.Title
	}
	if v.Description != t.Description && v.Description != "" {
		out["description"] = v.Description
	}
	if v.Deprecated && !t.Deprecated {
		out["deprecated"] = true
	}
	if v.ReadOnly && !t.ReadOnly {
		out["readOnly"] = true
	}
	if v.WriteOnly && !t.WriteOnly {
		out["writeOnly"] = true
	}
	if len(v.AllOf) > len(t.AllOf) {
		var extra []any
		for _, s := range v.AllOf[len(t.AllOf):] {
			extra = append(extra, c.schema(s, d))
		}
		out["allOf"] = extra
	}
	return out
}

// def returns the def name for sr.Ref, queueing its conversion the first
// time, and the schema the def holds.
func (c *converter) def(sr *openapi3.SchemaRef) (string, *openapi3.SchemaRef) {
	target := c.target(sr)
	if name, ok := c.names[sr.Ref]; ok {
		return name, target
	}
	base := strings.TrimPrefix(sr.Ref, componentSchemaPrefix)
	if base == sr.Ref || strings.Contains(base, "/") {
		base = strings.ReplaceAll(strings.TrimPrefix(sr.Ref, "#/"), "/", ".")
	}
	base = defName(unescapeToken(base))
	name := base
	for i := 2; c.defs[name] != nil; i++ {
		name = fmt.Sprintf("%s_%d", base, i)
	}
	c.names[sr.Ref] = name
	c.defs[name] = &convertedDef{}
	if target == nil {
		c.fail(fmt.Errorf("unresolved schema reference %q", sr.Ref))
		target = &openapi3.SchemaRef{Value: &openapi3.Schema{}}
	}
	c.pending = append(c.pending, pendingDef{name: name, target: target})
	return name, target
}

// target finds the schema a reference points at: the component itself for
// "#/components/schemas/X" (which may in turn be a reference), else the value
// kin-openapi resolved.
func (c *converter) target(sr *openapi3.SchemaRef) *openapi3.SchemaRef {
	if name, ok := strings.CutPrefix(sr.Ref, componentSchemaPrefix); ok && !strings.Contains(name, "/") {
		if c.doc.Components != nil {
			if t := c.doc.Components.Schemas[unescapeToken(name)]; t != nil {
				return t
			}
		}
	}
	if sr.Value == nil {
		return nil
	}
	return &openapi3.SchemaRef{Value: sr.Value}
}

func (c *converter) fail(err error) {
	if c.err == nil {
		c.err = err
	}
}

// flush converts every queued def.
func (c *converter) flush() error {
	for len(c.pending) > 0 {
		p := c.pending[0]
		c.pending = c.pending[1:]
		d := deps{}
		v := c.schema(p.target, d)
		raw, err := json.Marshal(v)
		if err != nil {
			c.fail(fmt.Errorf("schema %s: %w", p.name, err))
			continue
		}
		def := c.defs[p.name]
		def.raw = raw
		for n := range d {
			def.deps = append(def.deps, n)
		}
		sort.Strings(def.deps)
	}
	return c.err
}

// closure returns the defs reachable from d, for a schema's "$defs".
//
// With a budget (> 0 bytes), the defs d names are always included, the ones
// further away only while the total stays within it, nearest first; the rest
// become a stub that names them, so every reference still resolves. Output
// schemas use this: in documents like Stripe's, whose objects reach nearly
// every other object, the full closure is megabytes per tool.
func (c *converter) closure(d deps, budget int) map[string]json.RawMessage {
	if len(d) == 0 {
		return nil
	}
	out := map[string]json.RawMessage{}
	level := sortedKeys(d)
	size := 0
	for first := true; len(level) > 0; first = false {
		var next []string
		for _, n := range level {
			if _, ok := out[n]; ok {
				continue
			}
			def := c.defs[n]
			if !first && budget > 0 && size+len(def.raw) > budget {
				out[n] = stubDef(n)
				continue
			}
			out[n] = def.raw
			size += len(def.raw)
			next = append(next, def.deps...)
		}
		level = next
	}
	return out
}

func stubDef(name string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{
		"title":       name,
		"description": "Not expanded in this output schema (size limit); see the document's schema " + name + ".",
	})
	return b
}

// defName keeps a component name readable and safe inside a JSON pointer in a
// URI fragment: letters, digits, ".", "-" and "_" stay (so "checkout.session"
// is kept), anything else becomes "_".
func defName(s string) string {
	if s == "" {
		return "schema"
	}
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, s)
}

var tokenUnescaper = strings.NewReplacer("~1", "/", "~0", "~")

func unescapeToken(s string) string { return tokenUnescaper.Replace(s) }

var jsonTypes = map[string]bool{"null": true, "boolean": true, "object": true, "array": true, "number": true, "string": true, "integer": true}

// inline converts one schema object, dropping what is OpenAPI-only
// (discriminator, xml, externalDocs, nullable, extensions) or would change
// how the tool schema resolves (identifiers, anchors, dialects, nested
// "$defs", whose uses were already turned into references).
func (c *converter) inline(s *openapi3.Schema, d deps) any {
	if s.Always != nil {
		return *s.Always
	}
	m := map[string]any{}
	types := typesOf(s)
	switch len(types) {
	case 0:
	case 1:
		m["type"] = types[0]
	default:
		m["type"] = types
	}
	annotations(m, s)
	numberKeywords(m, s)
	stringKeywords(m, s)
	c.arrayKeywords(m, s, d)
	c.objectKeywords(m, s, d)
	c.composition(m, s, d)

	// OpenAPI 3.0 "nullable" without a type of its own (a composition or an
	// enum): null is one more alternative.
	if s.Nullable && len(types) == 0 && (s.AllOf != nil || s.AnyOf != nil || s.OneOf != nil || s.Enum != nil) {
		return map[string]any{"anyOf": []any{m, map[string]any{"type": "null"}}}
	}
	return m
}

// typesOf is the schema's JSON types, with null added when OpenAPI 3.0's
// nullable says so.
func typesOf(s *openapi3.Schema) []any {
	var types []any
	if s.Type != nil {
		for _, t := range *s.Type {
			if jsonTypes[t] {
				types = append(types, t)
			}
		}
	}
	if s.Nullable && len(types) > 0 && !slices.Contains(types, any("null")) {
		types = append(types, "null")
	}
	return types
}

// annotations copies the keywords that describe any schema.
func annotations(m map[string]any, s *openapi3.Schema) {
	if s.Title != "" {
		m["title"] = s.Title
	}
	if s.Description != "" {
		m["description"] = s.Description
	}
	if s.Format != "" {
		m["format"] = s.Format
	}
	if s.Enum != nil {
		enum := s.Enum
		if s.Nullable && !slices.Contains(enum, nil) {
			enum = append(slices.Clip(enum), nil)
		}
		m["enum"] = enum
	}
	if s.Const != nil {
		m["const"] = s.Const
	}
	if s.Default != nil {
		m["default"] = s.Default
	}
	examples := slices.Clip(s.Examples)
	if s.Example != nil {
		examples = append(examples, s.Example)
	}
	if len(examples) > 0 {
		m["examples"] = examples
	}
	if s.Deprecated {
		m["deprecated"] = true
	}
	if s.ReadOnly {
		m["readOnly"] = true
	}
	if s.WriteOnly {
		m["writeOnly"] = true
	}
}

// numberKeywords copies the bounds of numbers. OpenAPI 3.0 writes exclusive
// bounds as booleans next to minimum/maximum; 2020-12 as numbers of their own.
func numberKeywords(m map[string]any, s *openapi3.Schema) {
	if s.Min != nil {
		m["minimum"] = *s.Min
	}
	if s.Max != nil {
		m["maximum"] = *s.Max
	}
	if s.ExclusiveMin.Value != nil {
		m["exclusiveMinimum"] = *s.ExclusiveMin.Value
	} else if s.ExclusiveMin.IsTrue() && s.Min != nil {
		m["exclusiveMinimum"] = *s.Min
		delete(m, "minimum")
	}
	if s.ExclusiveMax.Value != nil {
		m["exclusiveMaximum"] = *s.ExclusiveMax.Value
	} else if s.ExclusiveMax.IsTrue() && s.Max != nil {
		m["exclusiveMaximum"] = *s.Max
		delete(m, "maximum")
	}
	if s.MultipleOf != nil {
		m["multipleOf"] = *s.MultipleOf
	}
}

// stringKeywords copies the constraints on strings.
func stringKeywords(m map[string]any, s *openapi3.Schema) {
	if s.MinLength > 0 {
		m["minLength"] = s.MinLength
	}
	if s.MaxLength != nil {
		m["maxLength"] = *s.MaxLength
	}
	if s.Pattern != "" {
		m["pattern"] = s.Pattern
	}
	if s.ContentMediaType != "" {
		m["contentMediaType"] = s.ContentMediaType
	}
	if s.ContentEncoding != "" {
		m["contentEncoding"] = s.ContentEncoding
	}
}

// arrayKeywords converts the keywords on arrays.
func (c *converter) arrayKeywords(m map[string]any, s *openapi3.Schema, d deps) {
	if s.Items != nil {
		m["items"] = c.schema(s.Items, d)
	}
	if len(s.PrefixItems) > 0 {
		m["prefixItems"] = c.list(s.PrefixItems, d)
	}
	if s.MinItems > 0 {
		m["minItems"] = s.MinItems
	}
	if s.MaxItems != nil {
		m["maxItems"] = *s.MaxItems
	}
	if s.UniqueItems {
		m["uniqueItems"] = true
	}
	if s.Contains != nil {
		m["contains"] = c.schema(s.Contains, d)
	}
	if s.MinContains != nil {
		m["minContains"] = *s.MinContains
	}
	if s.MaxContains != nil {
		m["maxContains"] = *s.MaxContains
	}
	c.boolSchema(m, "unevaluatedItems", s.UnevaluatedItems, d)
}

// objectKeywords converts the keywords on objects.
func (c *converter) objectKeywords(m map[string]any, s *openapi3.Schema, d deps) {
	if len(s.Properties) > 0 {
		m["properties"] = c.schemas(s.Properties, d)
	}
	if req := c.required(s); len(req) > 0 {
		m["required"] = req
	}
	c.boolSchema(m, "additionalProperties", s.AdditionalProperties, d)
	if s.MinProps > 0 {
		m["minProperties"] = s.MinProps
	}
	if s.MaxProps != nil {
		m["maxProperties"] = *s.MaxProps
	}
	if len(s.PatternProperties) > 0 {
		m["patternProperties"] = c.schemas(s.PatternProperties, d)
	}
	if len(s.DependentSchemas) > 0 {
		m["dependentSchemas"] = c.schemas(s.DependentSchemas, d)
	}
	if len(s.DependentRequired) > 0 {
		m["dependentRequired"] = s.DependentRequired
	}
	if s.PropertyNames != nil {
		m["propertyNames"] = c.schema(s.PropertyNames, d)
	}
	c.boolSchema(m, "unevaluatedProperties", s.UnevaluatedProperties, d)
}

// composition converts the keywords that combine schemas.
func (c *converter) composition(m map[string]any, s *openapi3.Schema, d deps) {
	if len(s.AllOf) > 0 {
		m["allOf"] = c.list(s.AllOf, d)
	}
	if len(s.AnyOf) > 0 {
		m["anyOf"] = c.list(s.AnyOf, d)
	}
	if len(s.OneOf) > 0 {
		m["oneOf"] = c.list(s.OneOf, d)
	}
	if s.Not != nil {
		m["not"] = c.schema(s.Not, d)
	}
	if s.If != nil {
		m["if"] = c.schema(s.If, d)
	}
	if s.Then != nil {
		m["then"] = c.schema(s.Then, d)
	}
	if s.Else != nil {
		m["else"] = c.schema(s.Else, d)
	}
}

func (c *converter) list(refs openapi3.SchemaRefs, d deps) []any {
	out := make([]any, 0, len(refs))
	for _, r := range refs {
		out = append(out, c.schema(r, d))
	}
	return out
}

func (c *converter) schemas(refs openapi3.Schemas, d deps) map[string]any {
	out := make(map[string]any, len(refs))
	for k, r := range refs {
		out[k] = c.schema(r, d)
	}
	return out
}

// boolSchema converts a keyword that is either a boolean or a schema.
func (c *converter) boolSchema(m map[string]any, key string, b openapi3.BoolSchema, d deps) {
	switch {
	case b.Has != nil:
		m[key] = *b.Has
	case b.Schema != nil:
		m[key] = c.schema(b.Schema, d)
	}
}

// required drops the properties OpenAPI says are not required on this side
// of the wire: readOnly ones in requests, writeOnly ones in responses.
func (c *converter) required(s *openapi3.Schema) []string {
	var out []string
	for _, name := range s.Required {
		if p := s.Properties[name]; p != nil && p.Value != nil {
			if c.dir == request && p.Value.ReadOnly || c.dir == response && p.Value.WriteOnly {
				continue
			}
		}
		out = append(out, name)
	}
	return out
}
