package openapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/textproto"
	"strconv"
	"strings"
)

// This file serialises parameter values the way OpenAPI's style and explode
// say (https://spec.openapis.org/oas/v3.1.0#style-values). Values arrive as
// decoded JSON; object keys are written in sorted order so requests are
// reproducible.

// scalar formats a primitive; an array or object nested deeper than a style
// can express is written as JSON.
func scalar(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32)
	case json.Number:
		return x.String()
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprint(x)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func scalars(list []any, esc func(string) string) []string {
	out := make([]string, len(list))
	for i, x := range list {
		out[i] = esc(scalar(x))
	}
	return out
}

// objectParts returns an object's keys (sorted) and values, escaped.
func objectParts(obj map[string]any, esc func(string) string) (keys, values []string) {
	for _, k := range sortedKeys(obj) {
		keys = append(keys, esc(k))
		values = append(values, esc(scalar(obj[k])))
	}
	return keys, values
}

func joinPairs(keys, values []string, kv, sep string) string {
	parts := make([]string, len(keys))
	for i := range keys {
		parts[i] = keys[i] + kv + values[i]
	}
	return strings.Join(parts, sep)
}

func interleave(keys, values []string) []string {
	out := make([]string, 0, 2*len(keys))
	for i := range keys {
		out = append(out, keys[i], values[i])
	}
	return out
}

// pathValue serialises a path parameter (styles simple, label, matrix). A
// value of dots only is percent-encoded whole: "." and ".." would be dot
// segments, which the upstream (or a proxy before it) resolves, so a tool
// call could reach another path than its operation's.
func pathValue(p param, v any) string {
	s := pathText(p, v)
	if s != "" && strings.Trim(s, ".") == "" {
		return strings.Repeat("%2E", len(s))
	}
	return s
}

func pathText(p param, v any) string {
	esc := escape
	name := esc(p.Name)
	switch x := v.(type) {
	case []any:
		items := scalars(x, esc)
		switch p.Style {
		case "label":
			if p.Explode {
				return "." + strings.Join(items, ".")
			}
			return "." + strings.Join(items, ",")
		case "matrix":
			if p.Explode {
				if len(items) == 0 {
					return ""
				}
				return ";" + name + "=" + strings.Join(items, ";"+name+"=")
			}
			return ";" + name + "=" + strings.Join(items, ",")
		}
		return strings.Join(items, ",")
	case map[string]any:
		keys, values := objectParts(x, esc)
		switch p.Style {
		case "label":
			if p.Explode {
				return "." + joinPairs(keys, values, "=", ".")
			}
			return "." + strings.Join(interleave(keys, values), ",")
		case "matrix":
			if p.Explode {
				return ";" + joinPairs(keys, values, "=", ";")
			}
			return ";" + name + "=" + strings.Join(interleave(keys, values), ",")
		}
		if p.Explode {
			return joinPairs(keys, values, "=", ",")
		}
		return strings.Join(interleave(keys, values), ",")
	}
	s := esc(scalar(v))
	switch p.Style {
	case "label":
		return "." + s
	case "matrix":
		return ";" + name + "=" + s
	}
	return s
}

// headerValue serialises a header parameter (style simple). Header values
// are not escaped; net/http refuses ones with line breaks.
func headerValue(p param, v any) string {
	id := func(s string) string { return s }
	switch x := v.(type) {
	case []any:
		return strings.Join(scalars(x, id), ",")
	case map[string]any:
		keys, values := objectParts(x, id)
		if p.Explode {
			return joinPairs(keys, values, "=", ",")
		}
		return strings.Join(interleave(keys, values), ",")
	}
	return scalar(v)
}

// cookiePairs serialises a cookie parameter (style form) into name=value
// pairs for the Cookie header.
func cookiePairs(p param, v any) []string {
	esc := escapeCookie
	name := esc(p.Name)
	switch x := v.(type) {
	case []any:
		items := scalars(x, esc)
		if p.Explode {
			out := make([]string, len(items))
			for i, it := range items {
				out[i] = name + "=" + it
			}
			return out
		}
		return []string{name + "=" + strings.Join(items, ",")}
	case map[string]any:
		keys, values := objectParts(x, esc)
		if p.Explode {
			out := make([]string, len(keys))
			for i := range keys {
				out[i] = keys[i] + "=" + values[i]
			}
			return out
		}
		return []string{name + "=" + strings.Join(interleave(keys, values), ",")}
	}
	return []string{name + "=" + esc(scalar(v))}
}

// queryPairs serialises one query parameter or form field into escaped
// name=value pairs (styles form, spaceDelimited, pipeDelimited, deepObject).
func queryPairs(name, style string, explode, allowReserved bool, v any) []string {
	esc := escape
	if allowReserved {
		esc = escapeReserved
	}
	n := escapeName(name)
	if style == "deepObject" {
		var out []string
		deepPairs(n, v, esc, &out)
		return out
	}
	sep := ","
	switch style {
	case "spaceDelimited":
		sep = "%20"
	case "pipeDelimited":
		sep = "|"
	}
	switch x := v.(type) {
	case []any:
		items := scalars(x, esc)
		if explode {
			out := make([]string, len(items))
			for i, it := range items {
				out[i] = n + "=" + it
			}
			return out
		}
		return []string{n + "=" + strings.Join(items, sep)}
	case map[string]any:
		keys, values := objectParts(x, esc)
		if explode {
			out := make([]string, len(keys))
			for i := range keys {
				out[i] = keys[i] + "=" + values[i]
			}
			return out
		}
		return []string{n + "=" + strings.Join(interleave(keys, values), sep)}
	}
	return []string{n + "=" + esc(scalar(v))}
}

// deepPairs writes nested objects and arrays as name[key][sub]=value, arrays
// with their indexes (name[0]=a), the form Stripe and qs-style parsers read.
func deepPairs(prefix string, v any, esc func(string) string, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range sortedKeys(x) {
			if x[k] != nil {
				deepPairs(prefix+"["+escapeName(k)+"]", x[k], esc, out)
			}
		}
	case []any:
		for i, it := range x {
			deepPairs(prefix+"["+strconv.Itoa(i)+"]", it, esc, out)
		}
	default:
		*out = append(*out, prefix+"="+esc(scalar(v)))
	}
}

// formBody encodes an application/x-www-form-urlencoded body: each top-level
// property like a query parameter, with its encoding (default form,
// exploded); a property with a JSON content type is sent as JSON text.
func formBody(v any, enc map[string]encoding) (string, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return "", fmt.Errorf("a form body must be an object, got %s", jsonKind(v))
	}
	var pairs []string
	for _, k := range sortedKeys(obj) {
		val := obj[k]
		if val == nil {
			continue
		}
		e, ok := enc[k]
		if !ok {
			e = encoding{Style: "form", Explode: true}
		}
		if e.ContentType != "" && isJSONMedia(e.ContentType) {
			b, err := json.Marshal(val)
			if err != nil {
				return "", fmt.Errorf("body.%s: %w", k, err)
			}
			val = string(b)
		}
		pairs = append(pairs, queryPairs(k, e.Style, e.Explode, e.AllowReserved, val)...)
	}
	return strings.Join(pairs, "&"), nil
}

// multipartBody encodes a multipart/form-data body: one part per top-level
// property, and one per item of an array (unless the property is sent as
// JSON). A part's media type is its encoding's contentType, else
// application/octet-stream for files, application/json for objects and
// arrays, and text/plain (left implicit, RFC 7578) for the rest. Files carry
// the property name as filename; their content is the string's bytes.
func multipartBody(v any, enc map[string]encoding) ([]byte, string, error) {
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, "", fmt.Errorf("a multipart body must be an object, got %s", jsonKind(v))
	}
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, k := range sortedKeys(obj) {
		val := obj[k]
		if val == nil {
			continue
		}
		e := enc[k]
		items := []any{val}
		if list, ok := val.([]any); ok && (e.ContentType == "" || !isJSONMedia(e.ContentType)) {
			items = list
		}
		for _, it := range items {
			ct := e.ContentType
			if ct == "" {
				switch it.(type) {
				case map[string]any, []any:
					ct = "application/json"
				default:
					if e.Binary {
						ct = "application/octet-stream"
					}
				}
			}
			var data []byte
			if s, ok := it.(string); ok {
				data = []byte(s)
			} else if isJSONMedia(ct) {
				b, err := json.Marshal(it)
				if err != nil {
					return nil, "", fmt.Errorf("body.%s: %w", k, err)
				}
				data = b
			} else {
				data = []byte(scalar(it))
			}
			h := textproto.MIMEHeader{}
			disp := `form-data; name="` + quoteEscaper.Replace(k) + `"`
			if e.Binary {
				disp += `; filename="` + quoteEscaper.Replace(k) + `"`
			}
			h.Set("Content-Disposition", disp)
			if ct != "" {
				h.Set("Content-Type", ct)
			}
			part, err := w.CreatePart(h)
			if err != nil {
				return nil, "", fmt.Errorf("body.%s: %w", k, err)
			}
			if _, err := part.Write(data); err != nil {
				return nil, "", fmt.Errorf("body.%s: %w", k, err)
			}
		}
	}
	if err := w.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), w.FormDataContentType(), nil
}

var quoteEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

func jsonKind(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case nil:
		return "null"
	case bool:
		return "a boolean"
	}
	return "a number"
}

// Escapers. Unreserved characters (RFC 3986) are never escaped.
func isUnreserved(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func escapeWith(s string, keep func(byte) bool) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if !keep(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if keep(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

// escape escapes everything but unreserved characters: path, query and form
// names and values, so a "/" in a path value never splits the path and a "&"
// in a query value never splits the query.
func escape(s string) string { return escapeWith(s, isUnreserved) }

// escapeName escapes a query or form field name, leaving brackets as they
// are: names like Datadog's "filter[shared]" and deepObject's "a[b]" are
// written the way their APIs document them.
func escapeName(s string) string {
	return escapeWith(s, func(c byte) bool { return isUnreserved(c) || c == '[' || c == ']' })
}

// escapeReserved is for allowReserved parameters: RFC 3986 reserved
// characters pass, except those that would split the query (& = # +).
func escapeReserved(s string) string {
	return escapeWith(s, func(c byte) bool {
		return isUnreserved(c) || strings.IndexByte(":/?[]@!$'()*,;", c) >= 0
	})
}

// escapeCookie escapes what a cookie value cannot hold (RFC 6265
// cookie-octet): controls, space, quote, comma, semicolon, backslash, and
// "%" itself.
func escapeCookie(s string) string {
	return escapeWith(s, func(c byte) bool {
		return c > 0x20 && c < 0x7f && c != '"' && c != ',' && c != ';' && c != '\\' && c != '%'
	})
}
