package openapi

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// outputDefsBudget bounds the "$defs" of an output schema (see
// converter.closure). Input schemas are never cut: the host validates with
// them.
const outputDefsBudget = 32 << 10

// outputSchema describes the result Invoke returns: {status, headers, body},
// with one anyOf branch per documented response.
func (d *definer) outputSchema(op *openapi3.Operation) (json.RawMessage, error) {
	dp := deps{}
	var branches []any
	if op.Responses != nil {
		for _, code := range op.Responses.Keys() {
			ref := op.Responses.Value(code)
			if ref == nil || ref.Value == nil {
				continue
			}
			r := ref.Value
			desc := code
			if r.Description != nil && *r.Description != "" {
				desc += ": " + *r.Description
			}
			props := map[string]any{}
			if st := statusSchema(code); st != nil {
				props["status"] = st
			}
			if mt, media := pickMedia(r.Content); mt != "" {
				switch {
				case !isJSONMedia(mt):
					props["body"] = map[string]any{"type": "string", "contentMediaType": mt}
				case media != nil && media.Schema != nil:
					props["body"] = d.resp.schema(media.Schema, dp)
				}
			}
			if len(r.Headers) > 0 {
				hs := map[string]any{}
				for name, h := range r.Headers {
					hp := map[string]any{"type": "string"}
					if h != nil && h.Value != nil && h.Value.Description != "" {
						hp["description"] = h.Value.Description
					}
					hs[strings.ToLower(name)] = hp
				}
				props["headers"] = map[string]any{"properties": hs}
			}
			branches = append(branches, map[string]any{"description": desc, "properties": props})
		}
	}
	if err := d.resp.flush(); err != nil {
		return nil, err
	}
	out := map[string]any{
		"$schema":  jsonSchemaDialect,
		"type":     "object",
		"required": []string{"status", "headers", "body"},
		"properties": map[string]any{
			"status": map[string]any{"type": "integer", "description": "HTTP status code."},
			"headers": map[string]any{
				"type":                 "object",
				"description":          "Response headers, names in lower case; a header sent more than once is a list.",
				"additionalProperties": map[string]any{"anyOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "array", "items": map[string]any{"type": "string"}}}},
			},
			"body": map[string]any{"description": "The response body: decoded JSON for JSON media types, else text (base64 when bodyEncoding says so); null when empty."},
			"bodyEncoding": map[string]any{
				"const":       "base64",
				"description": "Present when the body was not UTF-8 text and is given in base64.",
			},
		},
	}
	if len(branches) > 0 {
		out["anyOf"] = branches
	}
	if defs := d.resp.closure(dp, outputDefsBudget); defs != nil {
		out["$defs"] = defs
	}
	return json.Marshal(out)
}

// statusSchema matches the status codes of one response key: "200", "2XX";
// nil for "default".
func statusSchema(code string) map[string]any {
	if n, err := strconv.Atoi(code); err == nil {
		return map[string]any{"const": n}
	}
	if len(code) == 3 && strings.EqualFold(code[1:], "XX") && code[0] >= '1' && code[0] <= '5' {
		lo := int(code[0]-'0') * 100
		return map[string]any{"minimum": lo, "maximum": lo + 99}
	}
	return nil
}
