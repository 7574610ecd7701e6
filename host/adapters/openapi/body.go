package openapi

import (
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// body picks the request body's media type and describes it.
func (d *definer) body(rb *openapi3.RequestBody, dp deps) (*body, any) {
	mt, media := pickMedia(rb.Content)
	b := &body{MediaType: mt}
	var sch any
	switch {
	case media != nil && media.Schema != nil:
		sch = d.req.schema(media.Schema, dp)
	case isJSONMedia(mt):
		sch = map[string]any{}
	case isFormMedia(mt) || isMultipartMedia(mt):
		sch = map[string]any{"type": "object"}
	default:
		sch = map[string]any{"type": "string"}
	}
	if media != nil && (isFormMedia(mt) || isMultipartMedia(mt)) {
		b.Encoding = encodings(media, isMultipartMedia(mt))
	}
	return b, annotate(sch, rb.Description, false)
}

// encodings resolves how each top-level property of a form or multipart body
// is sent. Only properties that differ from the default (style form, explode,
// no media type) are listed.
func encodings(media *openapi3.MediaType, multipart bool) map[string]encoding {
	props := map[string]*openapi3.Schema{}
	collectProperties(media.Schema, props, 0)
	out := map[string]encoding{}
	add := func(name string, e *openapi3.Encoding, s *openapi3.Schema) {
		enc := encoding{Style: "form", Explode: true}
		if e != nil {
			if ct, _, _ := strings.Cut(e.ContentType, ","); ct != "" {
				enc.ContentType = strings.TrimSpace(ct)
			}
			if e.Style != "" {
				enc.Style = e.Style
			}
			enc.Explode = enc.Style == "form"
			if e.Explode != nil {
				enc.Explode = *e.Explode
			}
			enc.AllowReserved = e.AllowReserved
		}
		if multipart {
			enc.Binary = isBinary(s, enc.ContentType)
		}
		if enc != (encoding{Style: "form", Explode: true}) {
			out[name] = enc
		}
	}
	for name, s := range props {
		add(name, media.Encoding[name], s)
	}
	for name, e := range media.Encoding {
		if _, ok := props[name]; !ok {
			add(name, e, nil)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// collectProperties gathers the top-level properties of a body schema,
// looking through allOf.
func collectProperties(sr *openapi3.SchemaRef, into map[string]*openapi3.Schema, depth int) {
	if sr == nil || sr.Value == nil || depth > 8 {
		return
	}
	for name, p := range sr.Value.Properties {
		if p != nil {
			into[name] = p.Value
		}
	}
	for _, s := range sr.Value.AllOf {
		collectProperties(s, into, depth+1)
	}
}

// isBinary says whether a multipart property is a file: a binary string, or
// declared with a media type that is neither text nor JSON.
func isBinary(s *openapi3.Schema, contentType string) bool {
	if s != nil {
		sch := s
		if sch.Type != nil && sch.Type.Is("array") && sch.Items != nil && sch.Items.Value != nil {
			sch = sch.Items.Value
		}
		if sch.Format == "binary" || sch.ContentMediaType != "" && !isTextMedia(sch.ContentMediaType) {
			return true
		}
	}
	return contentType != "" && !isTextMedia(contentType) && !isJSONMedia(contentType)
}
