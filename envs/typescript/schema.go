package typescript

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
)

// object is a JSON object that remembers its key order, so documentation
// lists parameters in the order the schema declares them.
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) get(key string) (any, bool) {
	if o == nil {
		return nil, false
	}
	v, ok := o.vals[key]
	return v, ok
}

func (o *object) str(key string) string {
	v, _ := o.get(key)
	s, _ := v.(string)
	return s
}

func (o *object) obj(key string) *object {
	v, _ := o.get(key)
	x, _ := v.(*object)
	return x
}

func (o *object) list(key string) []any {
	v, _ := o.get(key)
	x, _ := v.([]any)
	return x
}

// parseSchema decodes a JSON Schema keeping key order. An empty schema is
// an empty object.
func parseSchema(raw json.RawMessage) (*object, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return &object{vals: map[string]any{}}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	v, err := decodeOrdered(dec)
	if err != nil {
		return nil, fmt.Errorf("decoding schema: %w", err)
	}
	switch s := v.(type) {
	case *object:
		return s, nil
	case bool:
		// true accepts anything, false nothing; both render as their type.
		return &object{vals: map[string]any{}}, nil
	}
	return nil, errors.New("decoding schema: not an object")
}

func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &object{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k, _ := kt.(string)
				v, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; !dup {
					o.keys = append(o.keys, k)
				}
				o.vals[k] = v
			}
			_, err := dec.Token()
			return o, err
		case '[':
			var out []any
			for dec.More() {
				v, err := decodeOrdered(dec)
				if err != nil {
					return nil, err
				}
				out = append(out, v)
			}
			_, err := dec.Token()
			return out, err
		}
		return nil, io.ErrUnexpectedEOF
	}
	return tok, nil
}

// literal renders a decoded JSON value as a TypeScript/JSON literal.
func literal(v any) string {
	switch x := v.(type) {
	case *object:
		parts := make([]string, 0, len(x.keys))
		for _, k := range x.keys {
			parts = append(parts, propertyKey(k)+": "+literal(x.vals[k]))
		}
		if len(parts) == 0 {
			return "{}"
		}
		return "{ " + strings.Join(parts, ", ") + " }"
	case []any:
		parts := make([]string, 0, len(x))
		for _, e := range x {
			parts = append(parts, literal(e))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case nil:
		return "null"
	case json.Number:
		return x.String()
	}
	b, _ := json.Marshal(v)
	return string(b)
}

var identifier = regexp.MustCompile(`^[A-Za-z_$][A-Za-z0-9_$]*$`)

func propertyKey(k string) string {
	if identifier.MatchString(k) {
		return k
	}
	b, _ := json.Marshal(k)
	return string(b)
}

// tsTypes renders JSON Schemas as TypeScript types. References to $defs
// (and OpenAPI-style definitions) become named types, collected so the
// documentation can declare them.
type tsTypes struct {
	root *object
	refs []string // referenced names, in first-use order
	seen map[string]bool
}

// maxInlineDepth bounds nested object types; deeper levels render as
// Record<string, unknown> so documentation stays readable.
const maxInlineDepth = 4

func newTSTypes(root *object) *tsTypes {
	return &tsTypes{root: root, seen: map[string]bool{}}
}

func (t *tsTypes) render(s *object, depth int) string {
	if s == nil || len(s.keys) == 0 {
		return "unknown"
	}
	if ref := s.str("$ref"); ref != "" {
		return t.ref(ref)
	}
	var out string
	switch {
	case hasKey(s, "const"):
		v, _ := s.get("const")
		out = literal(v)
	case len(s.list("enum")) > 0:
		parts := make([]string, 0, len(s.list("enum")))
		for _, e := range s.list("enum") {
			parts = append(parts, literal(e))
		}
		out = strings.Join(parts, " | ")
	case len(s.list("oneOf")) > 0:
		out = t.combine(s.list("oneOf"), " | ", depth)
	case len(s.list("anyOf")) > 0:
		out = t.combine(s.list("anyOf"), " | ", depth)
	case len(s.list("allOf")) > 0:
		out = t.combine(s.list("allOf"), " & ", depth)
	default:
		out = t.byType(s, depth)
	}
	if nullable, _ := s.get("nullable"); nullable == true {
		out = union(out, "null")
	}
	return out
}

func hasKey(o *object, k string) bool { _, ok := o.get(k); return ok }

func union(a, b string) string {
	if a == "unknown" {
		return a
	}
	return a + " | " + b
}

func (t *tsTypes) combine(list []any, sep string, depth int) string {
	parts := make([]string, 0, len(list))
	for _, e := range list {
		sub, _ := e.(*object)
		r := t.render(sub, depth)
		if strings.Contains(r, " | ") || strings.Contains(r, " & ") {
			r = "(" + r + ")"
		}
		parts = append(parts, r)
	}
	return strings.Join(parts, sep)
}

func (t *tsTypes) byType(s *object, depth int) string {
	v, _ := s.get("type")
	switch typ := v.(type) {
	case string:
		return t.single(typ, s, depth)
	case []any:
		parts := make([]string, 0, len(typ))
		for _, e := range typ {
			name, _ := e.(string)
			parts = append(parts, t.single(name, s, depth))
		}
		return strings.Join(parts, " | ")
	}
	switch {
	case hasKey(s, "properties"), hasKey(s, "additionalProperties"):
		return t.single("object", s, depth)
	case hasKey(s, "items"), hasKey(s, "prefixItems"):
		return t.single("array", s, depth)
	}
	return "unknown"
}

func (t *tsTypes) single(typ string, s *object, depth int) string {
	switch typ {
	case "string":
		return "string"
	case "integer", "number":
		return "number"
	case "boolean":
		return "boolean"
	case "null":
		return "null"
	case "array":
		if prefix := s.list("prefixItems"); len(prefix) > 0 {
			parts := make([]string, 0, len(prefix))
			for _, e := range prefix {
				sub, _ := e.(*object)
				parts = append(parts, t.render(sub, depth+1))
			}
			return "[" + strings.Join(parts, ", ") + "]"
		}
		item := t.render(s.obj("items"), depth+1)
		if strings.ContainsAny(item, " |&") && !strings.HasPrefix(item, "{") {
			item = "(" + item + ")"
		}
		return item + "[]"
	case "object":
		return t.object(s, depth)
	}
	return "unknown"
}

func (t *tsTypes) object(s *object, depth int) string {
	props := s.obj("properties")
	if props == nil || len(props.keys) == 0 {
		if extra := s.obj("additionalProperties"); extra != nil {
			return "Record<string, " + t.render(extra, depth+1) + ">"
		}
		return "Record<string, unknown>"
	}
	if depth >= maxInlineDepth {
		return "Record<string, unknown>"
	}
	required := requiredSet(s)
	parts := make([]string, 0, len(props.keys))
	for _, k := range props.keys {
		sub, _ := props.vals[k].(*object)
		opt := "?"
		if required[k] {
			opt = ""
		}
		parts = append(parts, propertyKey(k)+opt+": "+t.render(sub, depth+1))
	}
	return "{ " + strings.Join(parts, "; ") + " }"
}

func requiredSet(s *object) map[string]bool {
	out := map[string]bool{}
	for _, r := range s.list("required") {
		if name, ok := r.(string); ok {
			out[name] = true
		}
	}
	return out
}

// ref names a referenced schema after the last segment of its pointer.
func (t *tsTypes) ref(ref string) string {
	name := ref[strings.LastIndex(ref, "/")+1:]
	name = tsTypeName(name)
	if !t.seen[ref] {
		t.seen[ref] = true
		t.refs = append(t.refs, ref)
	}
	return name
}

var nonIdentifierChars = regexp.MustCompile(`[^A-Za-z0-9_$]+`)

// tsTypeName makes a TypeScript type name from a schema name or tool id.
func tsTypeName(s string) string {
	parts := nonIdentifierChars.Split(s, -1)
	var b strings.Builder
	for _, p := range parts {
		if p == "" {
			continue
		}
		b.WriteString(strings.ToUpper(p[:1]) + p[1:])
	}
	name := b.String()
	if name == "" || (name[0] >= '0' && name[0] <= '9') {
		name = "T" + name
	}
	return name
}

// resolve finds a local reference ("#/$defs/Pet") in the root schema.
func (t *tsTypes) resolve(ref string) *object {
	path, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil
	}
	cur := t.root
	for _, seg := range strings.Split(path, "/") {
		seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
		cur = cur.obj(seg)
		if cur == nil {
			return nil
		}
	}
	return cur
}

// maxDeclarations bounds the named types a tool's documentation declares.
const maxDeclarations = 30

// declarations renders "type Name = ...;" for every referenced schema,
// including those referenced by the declarations themselves.
func (t *tsTypes) declarations() string {
	var b strings.Builder
	for i := 0; i < len(t.refs) && i < maxDeclarations; i++ {
		ref := t.refs[i]
		name := tsTypeName(ref[strings.LastIndex(ref, "/")+1:])
		target := t.resolve(ref)
		body := "unknown"
		if target != nil {
			body = t.render(target, 1)
		}
		fmt.Fprintf(&b, "type %s = %s;\n", name, body)
	}
	if len(t.refs) > maxDeclarations {
		fmt.Fprintf(&b, "// … %d more types\n", len(t.refs)-maxDeclarations)
	}
	return b.String()
}

// example builds a plausible value for a schema: its own example, default,
// const or first enum value, else a placeholder of its type. Objects get
// their required properties.
func (t *tsTypes) example(s *object, depth int) any {
	if s == nil {
		return nil
	}
	if ref := s.str("$ref"); ref != "" {
		if depth > maxInlineDepth {
			return nil
		}
		return t.example(t.resolve(ref), depth+1)
	}
	if ex := s.list("examples"); len(ex) > 0 {
		return ex[0]
	}
	for _, k := range []string{"example", "default", "const"} {
		if v, ok := s.get(k); ok {
			return v
		}
	}
	if e := s.list("enum"); len(e) > 0 {
		return e[0]
	}
	for _, k := range []string{"oneOf", "anyOf", "allOf"} {
		if l := s.list(k); len(l) > 0 {
			sub, _ := l[0].(*object)
			return t.example(sub, depth+1)
		}
	}
	typ, _ := s.get("type")
	if list, ok := typ.([]any); ok && len(list) > 0 {
		typ = list[0]
	}
	switch typ {
	case "string":
		switch s.str("format") {
		case "date-time":
			return "2025-01-01T00:00:00Z"
		case "date":
			return "2025-01-01"
		case "email":
			return "user@example.com"
		case "uri", "url":
			return "https://example.com"
		}
		return "string"
	case "integer", "number":
		return json.Number("0")
	case "boolean":
		return false
	case "array":
		if items := s.obj("items"); items != nil && depth <= maxInlineDepth {
			return []any{t.example(items, depth+1)}
		}
		return []any{}
	case "null":
		return nil
	}
	if typ == "object" || hasKey(s, "properties") {
		return t.exampleObject(s, depth, false)
	}
	return nil
}

// exampleObject fills the required properties, or with top set and nothing
// required, the first property so the example shows the shape of a call.
func (t *tsTypes) exampleObject(s *object, depth int, top bool) *object {
	out := &object{vals: map[string]any{}}
	props := s.obj("properties")
	if props == nil || depth > maxInlineDepth {
		return out
	}
	required := requiredSet(s)
	keys := make([]string, 0, len(props.keys))
	for _, k := range props.keys {
		if required[k] {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 && top && len(props.keys) > 0 {
		keys = props.keys[:1]
	}
	for _, k := range keys {
		sub, _ := props.vals[k].(*object)
		out.keys = append(out.keys, k)
		out.vals[k] = t.example(sub, depth+1)
	}
	return out
}
