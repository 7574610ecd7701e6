package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
)

// compat rewrites the parts of a real-world document that kin-openapi refuses
// but whose meaning is clear, and reports whether it changed anything. It only
// runs after a first load failed, so well-formed documents pay nothing.
//
//   - A null "$ref" (YAML reads `$ref: #/x` unquoted as a
//     comment, so as null) is dropped: the document's schema is what is left.
//   - A "$ref" to a schema's "$id" (OpenAPI 3.1 / JSON Schema 2020-12), with
//     or without a "#anchor" or "#/pointer", becomes the local JSON pointer of
//     its target.
//   - "items" given as a list (draft-04 tuple form, used by Slack to mean
//     "one of these") becomes "items": {"anyOf": [...]}.
//
// Data keywords (example, examples, default, enum, const) and extensions are
// never touched.
func compat(data []byte) ([]byte, bool, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, false, fmt.Errorf("compat: %w", err)
	}
	c := &compatRewriter{ids: map[string]string{}, anchors: map[string]string{}}
	base, _ := url.Parse(compatBase)
	c.index(doc, base, "")
	c.rewrite(doc, base)
	if !c.changed {
		return data, false, nil
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, false, fmt.Errorf("compat: %w", err)
	}
	return out, true, nil
}

// compatBase is the stand-in base URI of the document: "$id"s and "$ref"s
// resolve against it the same way, so they meet whatever the real one is.
const compatBase = "https://document.invalid/openapi"

type compatRewriter struct {
	ids     map[string]string // resolved $id → JSON pointer
	anchors map[string]string // resolved $id + "#" + $anchor → JSON pointer
	changed bool
}

func skipCompat(key string) bool {
	switch key {
	case "example", "examples", "default", "enum", "const":
		return true
	}
	return strings.HasPrefix(key, "x-")
}

// scope returns the base URI inside obj: its own "$id" resolved against the
// enclosing base, or the enclosing base.
func scope(obj map[string]any, base *url.URL) *url.URL {
	id, ok := obj["$id"].(string)
	if !ok {
		return base
	}
	u, err := base.Parse(id)
	if err != nil {
		return base
	}
	u.Fragment = ""
	return u
}

func (c *compatRewriter) index(v any, base *url.URL, ptr string) {
	switch v := v.(type) {
	case []any:
		for i, x := range v {
			c.index(x, base, fmt.Sprintf("%s/%d", ptr, i))
		}
	case map[string]any:
		if _, ok := v["$id"].(string); ok {
			base = scope(v, base)
			c.ids[base.String()] = ptr
		}
		if a, ok := v["$anchor"].(string); ok {
			c.anchors[base.String()+"#"+a] = ptr
		}
		for k, x := range v {
			if !skipCompat(k) {
				c.index(x, base, ptr+"/"+escapeToken(k))
			}
		}
	}
}

func (c *compatRewriter) rewrite(v any, base *url.URL) {
	switch v := v.(type) {
	case []any:
		for _, x := range v {
			c.rewrite(x, base)
		}
	case map[string]any:
		base = scope(v, base)
		if ref, present := v["$ref"]; present {
			if ref == nil {
				delete(v, "$ref")
				c.changed = true
			} else if s, ok := ref.(string); ok {
				if local, ok := c.localize(s, base); ok {
					v["$ref"] = local
					c.changed = true
				}
			}
		}
		if items, ok := v["items"].([]any); ok {
			v["items"] = map[string]any{"anyOf": items}
			c.changed = true
		}
		for k, x := range v {
			if !skipCompat(k) {
				c.rewrite(x, base)
			}
		}
	}
}

// localize maps a "$ref" to an "$id" in the document onto a local pointer.
func (c *compatRewriter) localize(ref string, base *url.URL) (string, bool) {
	if strings.HasPrefix(ref, "#") {
		return "", false
	}
	u, err := base.Parse(ref)
	if err != nil {
		return "", false
	}
	frag := u.Fragment
	u.Fragment = ""
	ptr, ok := c.ids[u.String()]
	if !ok {
		return "", false
	}
	switch {
	case frag == "":
		return "#" + ptr, true
	case strings.HasPrefix(frag, "/"):
		return "#" + ptr + frag, true
	}
	if p, ok := c.anchors[u.String()+"#"+frag]; ok {
		return "#" + p, true
	}
	return "", false
}

var tokenEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// escapeToken escapes one JSON pointer token (RFC 6901).
func escapeToken(s string) string { return tokenEscaper.Replace(s) }
