package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/danielgtaylor/huma/v2"
	"github.com/go-chi/chi/v5"
)

// DefaultServer is the address `cyrnel serve` listens on unless told
// otherwise: the document's one server entry (validators and test runners
// such as Dredd and Prism need one; another host is named on their command
// line).
const DefaultServer = "http://127.0.0.1:9371"

// describeEventStream replaces huma's model of the event stream (an array
// of events, which it is not: a client receives text/event-stream) with a
// string whose description names each event and its data's schema.
func describeEventStream(o *huma.OpenAPI, path string) {
	op := o.Paths[path].Get
	mt := op.Responses["200"].Content["text/event-stream"]
	var events []string
	for _, item := range mt.Schema.Items.OneOf {
		name := strings.TrimPrefix(item.Title, "Event ")
		events = append(events, fmt.Sprintf("`%s` (data: %s)", name, strings.TrimPrefix(item.Properties["data"].Ref, "#/components/schemas/")))
	}
	slices.Sort(events)
	mt.Schema = &huma.Schema{
		Type: "string",
		Description: "Server-Sent Events (UTF-8 text, the SSE format): each event's `event` is its name and its `data` one JSON object; the schemas are under components. Events: " +
			strings.Join(events, ", ") + ".",
	}
}

// serveOpenAPI30 serves /openapi-3.0.json and /openapi-3.0.yaml from
// downgrade30 instead of huma's Downgrade, whose output is not valid 3.0.
func serveOpenAPI30(r chi.Router, o *huma.OpenAPI) {
	r.Get("/openapi-3.0.json", func(w http.ResponseWriter, _ *http.Request) {
		b, err := Spec30(o, "json")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/openapi+json")
		_, _ = w.Write(b)
	})
	r.Get("/openapi-3.0.yaml", func(w http.ResponseWriter, _ *http.Request) {
		b, err := Spec30(o, "yaml")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/openapi+yaml")
		_, _ = w.Write(b)
	})
}

// downgrade30 renders o as OpenAPI 3.0.3: huma's Downgrade, then what that
// leaves which 3.0 does not have.
func downgrade30(o *huma.OpenAPI) ([]byte, error) {
	raw, err := o.Downgrade()
	if err != nil {
		return nil, fmt.Errorf("downgrade spec: %w", err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("downgrade spec: %w", err)
	}
	fix30(doc)
	return json.Marshal(doc)
}

// fix30 rewrites, in place, the JSON Schema 2020-12 words 3.0 lacks: const
// becomes a one-value enum, contentMediaType goes (the media type's key
// says it), format base64 becomes byte, and a $ref with siblings (which 3.0
// ignores) is wrapped in allOf so its description stays.
func fix30(v any) {
	switch v := v.(type) {
	case map[string]any:
		if c, ok := v["const"]; ok {
			v["enum"] = []any{c}
			delete(v, "const")
		}
		delete(v, "contentMediaType")
		if v["format"] == "base64" {
			v["format"] = "byte"
		}
		if ref, ok := v["$ref"]; ok && len(v) > 1 {
			delete(v, "$ref")
			v["allOf"] = []any{map[string]any{"$ref": ref}}
		}
		for _, e := range v {
			fix30(e)
		}
	case []any:
		for _, e := range v {
			fix30(e)
		}
	}
}

// declareErrors declares on every operation the statuses the API layer
// itself can answer before the operation runs, where huma did not already
// declare a default response: 404 for a path that names nothing, 400 for a
// missing body or malformed JSON and 413 for a body past its limit
// (operations that take one), 415 for a body of another media type
// (operations that take JSON; any body where none is taken, but for GET,
// whose body is never read), 422 for an unknown query parameter, 500. The
// file upload takes bytes of any media type: no 415. It also records in
// bodies the "METHOD pattern" of each operation that takes a body, and
// copies each path parameter's example onto the parameter.
func declareErrors(o *huma.OpenAPI, bodies map[string]bool) {
	problem := func(status int) *huma.Response {
		return &huma.Response{Description: http.StatusText(status), Content: map[string]*huma.MediaType{
			"application/problem+json": {Schema: &huma.Schema{Ref: "#/components/schemas/ErrorModel"}},
		}}
	}
	for path, item := range o.Paths {
		for method, op := range map[string]*huma.Operation{
			http.MethodGet: item.Get, http.MethodPost: item.Post, http.MethodPut: item.Put,
			http.MethodPatch: item.Patch, http.MethodDelete: item.Delete,
		} {
			if op == nil {
				continue
			}
			// A path parameter's example on the parameter itself, where
			// test runners (Dredd) look for the value to send.
			for _, p := range op.Parameters {
				if p.In == "path" && p.Example == nil && p.Schema != nil && len(p.Schema.Examples) > 0 {
					p.Example = p.Schema.Examples[0]
				}
			}
			statuses := []int{http.StatusUnprocessableEntity, http.StatusInternalServerError}
			switch {
			case op.RequestBody != nil:
				bodies[method+" "+path] = true
				statuses = append(statuses, http.StatusBadRequest, http.StatusRequestEntityTooLarge)
				if op.RequestBody.Content["application/json"] != nil {
					statuses = append(statuses, http.StatusUnsupportedMediaType)
				}
			case method != http.MethodGet:
				statuses = append(statuses, http.StatusUnsupportedMediaType)
			}
			if strings.Contains(path, "{") {
				statuses = append(statuses, http.StatusNotFound)
			}
			if op.Responses["default"] != nil {
				continue
			}
			for _, st := range statuses {
				if code := fmt.Sprint(st); op.Responses[code] == nil {
					op.Responses[code] = problem(st)
				}
			}
		}
	}
}
