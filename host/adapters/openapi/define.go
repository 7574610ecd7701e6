package openapi

import (
	"context"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/cyrnel/cyrnel/host/adapters"
)

const jsonSchemaDialect = "https://json-schema.org/draft/2020-12/schema"

// methods are the HTTP methods an OpenAPI path item can hold, in the order
// their tools are listed (and so suffixed when ids collide).
var methods = []string{
	http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete,
	http.MethodOptions, http.MethodHead, http.MethodPatch, http.MethodTrace,
}

// locationRank orders the locations that compete for a property name: the
// first keeps the bare name, the others get their location as a suffix.
var locationRank = map[string]int{"body": 0, openapi3.ParameterInPath: 1, openapi3.ParameterInQuery: 2, openapi3.ParameterInHeader: 3, openapi3.ParameterInCookie: 4}

// definer builds a service definition from one loaded document.
type definer struct {
	doc       *openapi3.T
	req, resp *converter
	variables map[string]*configVariable
	varOrder  []string
}

type configVariable struct {
	def, desc string
	enum      []string
	mixed     bool // declared with different enums by different servers
}

type operation struct {
	path   string
	item   *openapi3.PathItem
	method string
	op     *openapi3.Operation
}

// define describes the service in doc. sourceURL is where it was read from,
// "" for inline content.
func define(ctx context.Context, doc *openapi3.T, sourceURL string) (adapters.ServiceDefinition, error) {
	d := &definer{
		doc:       doc,
		req:       newConverter(doc, request),
		resp:      newConverter(doc, response),
		variables: map[string]*configVariable{},
	}
	svc := serviceDomain{Version: domainVersion, SourceURL: sourceURL, Servers: d.servers(doc.Servers)}
	if doc.Components != nil && len(doc.Components.SecuritySchemes) > 0 {
		svc.SecuritySchemes = map[string]securityScheme{}
		for name, ref := range doc.Components.SecuritySchemes {
			if ref != nil && ref.Value != nil {
				s := ref.Value
				svc.SecuritySchemes[name] = securityScheme{Type: s.Type, Scheme: strings.ToLower(s.Scheme), In: s.In, Name: s.Name}
			}
		}
	}
	if doc.Security != nil {
		svc.Security = requirements(doc.Security)
	}

	var ops []operation
	if doc.Paths != nil {
		for _, path := range doc.Paths.Keys() {
			item := doc.Paths.Value(path)
			if item == nil {
				continue
			}
			for _, m := range methods {
				if op := item.GetOperation(m); op != nil {
					ops = append(ops, operation{path: path, item: item, method: m, op: op})
				}
			}
		}
	}
	ids := toolIDs(ops)

	tools := make([]adapters.ToolDefinition, 0, len(ops))
	for i, o := range ops {
		if err := ctx.Err(); err != nil {
			return adapters.ServiceDefinition{}, err
		}
		t, err := d.tool(o, ids[i])
		if err != nil {
			return adapters.ServiceDefinition{}, fmt.Errorf("%s %s: %w", o.method, o.path, err)
		}
		tools = append(tools, t)
	}

	out := adapters.ServiceDefinition{Tools: tools}
	if doc.Info != nil {
		out.Name = doc.Info.Title
		out.Description = joinText(doc.Info.Summary, doc.Info.Description)
	}
	var err error
	if out.ConfigSchema, err = json.Marshal(d.configSchema(doc)); err != nil {
		return adapters.ServiceDefinition{}, fmt.Errorf("config schema: %w", err)
	}
	if out.SecretsSchema, err = json.Marshal(secretsSchema(svc.SecuritySchemes, doc)); err != nil {
		return adapters.ServiceDefinition{}, fmt.Errorf("secrets schema: %w", err)
	}
	if out.AdapterDomain, err = json.Marshal(svc); err != nil {
		return adapters.ServiceDefinition{}, fmt.Errorf("adapter domain: %w", err)
	}
	return out, nil
}

// toolIDs gives every operation its id: the sanitised operationId, else one
// derived from method and path; a later operation whose id is taken gets
// "_2", "_3", … (never one that another operation's own id claims).
func toolIDs(ops []operation) []string {
	bases := make([]string, len(ops))
	own := map[string]bool{}
	for i, o := range ops {
		if o.op.OperationID != "" {
			bases[i] = identifier(o.op.OperationID, pathToolID(o.method, o.path))
		} else {
			bases[i] = pathToolID(o.method, o.path)
		}
		own[bases[i]] = true
	}
	namer := newUniqueNamer(own)
	ids := make([]string, len(ops))
	for i, b := range bases {
		ids[i] = namer.claim(b)
	}
	return ids
}

func (d *definer) tool(o operation, id string) (adapters.ToolDefinition, error) {
	op := o.op
	td := toolDomain{Version: domainVersion, Method: o.method, Path: o.path}
	if op.Servers != nil && len(*op.Servers) > 0 {
		td.Servers = d.servers(*op.Servers)
	} else if len(o.item.Servers) > 0 {
		td.Servers = d.servers(o.item.Servers)
	}
	if op.Security != nil {
		td.Security = requirements(*op.Security)
	}

	params := mergeParams(o.item.Parameters, op.Parameters)
	var rb *openapi3.RequestBody
	if op.RequestBody != nil {
		rb = op.RequestBody.Value
	}
	names := propertyNames(params, rb != nil)

	dp := deps{}
	props := map[string]any{}
	var required []string
	for i, p := range params {
		sm, err := p.SerializationMethod()
		if err != nil {
			return adapters.ToolDefinition{}, fmt.Errorf("parameter %q: %w", p.Name, err)
		}
		pd := param{Property: names[i], In: p.In, Name: p.Name, Style: sm.Style, Explode: sm.Explode, AllowReserved: p.AllowReserved}
		var sch any
		switch {
		case p.Schema != nil:
			sch = d.req.schema(p.Schema, dp)
		case len(p.Content) > 0:
			mt, media := pickMedia(p.Content)
			pd.ContentType = mt
			sch = map[string]any{}
			if media != nil {
				sch = d.req.schema(media.Schema, dp)
			}
		default:
			sch = map[string]any{"type": "string"}
		}
		props[pd.Property] = annotate(sch, p.Description, p.Deprecated)
		if p.Required || p.In == openapi3.ParameterInPath {
			required = append(required, pd.Property)
		}
		td.Params = append(td.Params, pd)
	}
	if rb != nil {
		b, sch := d.body(rb, dp)
		td.Body = b
		props["body"] = sch
		if rb.Required {
			required = append(required, "body")
		}
	}
	if err := d.req.flush(); err != nil {
		return adapters.ToolDefinition{}, fmt.Errorf("input schema: %w", err)
	}
	input := map[string]any{
		"$schema":              jsonSchemaDialect,
		"type":                 "object",
		"additionalProperties": false,
		"properties":           props,
	}
	if len(required) > 0 {
		input["required"] = required
	}
	if defs := d.req.closure(dp, 0); defs != nil {
		input["$defs"] = defs
	}

	t := adapters.ToolDefinition{
		ID:          id,
		Name:        op.OperationID,
		Description: joinText(op.Summary, op.Description),
	}
	if t.Name == "" {
		t.Name = o.method + " " + o.path
	}
	if t.Description == "" {
		t.Description = joinText(o.item.Summary, o.item.Description)
	}
	if t.Description == "" {
		t.Description = o.method + " " + o.path
	}
	if op.Deprecated {
		t.Description = joinText(t.Description, "Deprecated.")
	}
	var err error
	if t.InputSchema, err = json.Marshal(input); err != nil {
		return adapters.ToolDefinition{}, fmt.Errorf("input schema: %w", err)
	}
	if t.OutputSchema, err = d.outputSchema(op); err != nil {
		return adapters.ToolDefinition{}, fmt.Errorf("output schema: %w", err)
	}
	if t.AdapterDomain, err = json.Marshal(td); err != nil {
		return adapters.ToolDefinition{}, fmt.Errorf("adapter domain: %w", err)
	}
	return t, nil
}

// mergeParams applies an operation's parameters over its path item's (same
// name and location), dropping the headers OpenAPI says to ignore because the
// body and the security scheme own them, and parameters in a location a
// request does not have (OpenAPI 2.0 leftovers, typos).
func mergeParams(item, op openapi3.Parameters) []*openapi3.Parameter {
	var out []*openapi3.Parameter
	index := map[[2]string]int{}
	for _, list := range []openapi3.Parameters{item, op} {
		for _, ref := range list {
			if ref == nil || ref.Value == nil {
				continue
			}
			p := ref.Value
			if _, ok := locationRank[p.In]; !ok || p.In == "body" {
				continue
			}
			if p.In == openapi3.ParameterInHeader {
				if h := http.CanonicalHeaderKey(p.Name); h == "Content-Type" || h == "Authorization" {
					continue
				}
			}
			key := [2]string{p.In, p.Name}
			if i, ok := index[key]; ok {
				out[i] = p
				continue
			}
			index[key] = len(out)
			out = append(out, p)
		}
	}
	return out
}

// propertyNames names the input property of each parameter: its name as an
// identifier; when parameters in different locations (or the body) end up
// with the same name, all but the highest-ranked location get "_<location>";
// any remaining collision gets "_2", "_3", ….
func propertyNames(params []*openapi3.Parameter, hasBody bool) []string {
	best := map[string]string{} // base name → location that keeps it
	consider := func(base, in string) {
		if cur, ok := best[base]; !ok || locationRank[in] < locationRank[cur] {
			best[base] = in
		}
	}
	bases := make([]string, len(params))
	for i, p := range params {
		bases[i] = identifier(p.Name, "param")
		consider(bases[i], p.In)
	}
	namer := newUniqueNamer(nil)
	if hasBody {
		consider("body", "body")
		namer.claim("body")
	}
	names := make([]string, len(params))
	for i, p := range params {
		n := bases[i]
		if best[n] != p.In {
			n = identifier(n+"_"+p.In, "param")
		}
		names[i] = namer.claim(n)
	}
	return names
}

// annotate puts a parameter's description on its property schema.
func annotate(sch any, description string, deprecated bool) any {
	m, ok := sch.(map[string]any)
	if !ok {
		if sch == false {
			m = map[string]any{"not": map[string]any{}}
		} else {
			m = map[string]any{}
		}
	}
	if description != "" {
		m["description"] = description
	}
	if deprecated {
		m["deprecated"] = true
	}
	return m
}

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

// mediaRank orders request and response media types: JSON first (plain
// application/json before its variants), then form-urlencoded, then
// multipart, then anything else.
func mediaRank(mt string) int {
	base, _, _ := mime.ParseMediaType(mt)
	if base == "" {
		base = strings.ToLower(mt)
	}
	switch {
	case base == "application/json" && !strings.Contains(mt, ";"):
		return 0
	case isJSONMedia(mt):
		return 1
	case isFormMedia(mt):
		return 2
	case isMultipartMedia(mt):
		return 3
	}
	return 4
}

// pickMedia returns the preferred media type of content (ties broken by
// name, so the choice is stable).
func pickMedia(content openapi3.Content) (string, *openapi3.MediaType) {
	names := make([]string, 0, len(content))
	for n := range content {
		names = append(names, n)
	}
	if len(names) == 0 {
		return "", nil
	}
	sort.Slice(names, func(i, j int) bool {
		ri, rj := mediaRank(names[i]), mediaRank(names[j])
		if ri != rj {
			return ri < rj
		}
		return names[i] < names[j]
	})
	return names[0], content[names[0]]
}

func mediaBase(mt string) string {
	base, _, err := mime.ParseMediaType(mt)
	if err != nil {
		base, _, _ = strings.Cut(strings.ToLower(mt), ";")
		base = strings.TrimSpace(base)
	}
	return base
}

func isJSONMedia(mt string) bool {
	b := mediaBase(mt)
	return b == "application/json" || b == "text/json" || strings.HasSuffix(b, "+json")
}

func isFormMedia(mt string) bool { return mediaBase(mt) == "application/x-www-form-urlencoded" }

func isMultipartMedia(mt string) bool { return strings.HasPrefix(mediaBase(mt), "multipart/") }

func isTextMedia(mt string) bool {
	b := mediaBase(mt)
	return strings.HasPrefix(b, "text/") || isJSONMedia(b) || strings.HasSuffix(b, "+xml") || b == "application/xml"
}

// requirements turns security requirements into lists of scheme names.
func requirements(reqs openapi3.SecurityRequirements) *[]requirement {
	out := make([]requirement, 0, len(reqs))
	for _, r := range reqs {
		names := make(requirement, 0, len(r))
		for n := range r {
			names = append(names, n)
		}
		sort.Strings(names)
		out = append(out, names)
	}
	return &out
}

// servers converts servers for the domain and records their variables for
// the config schema.
func (d *definer) servers(list openapi3.Servers) []server {
	var out []server
	for _, s := range list {
		if s == nil {
			continue
		}
		sv := server{URL: s.URL}
		for _, name := range sortedKeys(s.Variables) {
			v := s.Variables[name]
			if v == nil {
				continue
			}
			if sv.Variables == nil {
				sv.Variables = map[string]serverVariable{}
			}
			sv.Variables[name] = serverVariable{Default: v.Default, Enum: v.Enum}
			d.recordVariable(name, v)
		}
		out = append(out, sv)
	}
	return out
}

func (d *definer) recordVariable(name string, v *openapi3.ServerVariable) {
	cv, ok := d.variables[name]
	if !ok {
		d.variables[name] = &configVariable{def: v.Default, desc: v.Description, enum: v.Enum}
		d.varOrder = append(d.varOrder, name)
		return
	}
	if !slices.Equal(cv.enum, v.Enum) {
		cv.mixed = true
	}
}

// configSchema is the service's config: serverUrl, the servers' variables,
// timeoutMs and allowPrivateNetwork.
func (d *definer) configSchema(doc *openapi3.T) map[string]any {
	var urls []string
	for _, s := range doc.Servers {
		if s != nil {
			urls = append(urls, s.URL)
		}
	}
	serverDesc := "Base URL of the API; overrides the servers of the document and of its operations."
	if len(urls) > 0 {
		serverDesc += " The document's servers: " + strings.Join(urls, ", ") + "."
	}
	vars := map[string]any{}
	for _, name := range d.varOrder {
		v := d.variables[name]
		p := map[string]any{"type": "string", "default": v.def}
		if v.desc != "" {
			p["description"] = v.desc
		}
		if len(v.enum) > 0 && !v.mixed {
			p["enum"] = v.enum
		}
		vars[name] = p
	}
	return map[string]any{
		"$schema":              jsonSchemaDialect,
		"type":                 "object",
		"additionalProperties": false,
		"properties": map[string]any{
			"serverUrl": map[string]any{"type": "string", "minLength": 1, "maxLength": 8192, "description": serverDesc},
			"variables": map[string]any{
				"type":                 "object",
				"description":          "Values of the server URL variables; a variable left out takes its default.",
				"properties":           vars,
				"additionalProperties": map[string]any{"type": "string"},
			},
			"timeoutMs": map[string]any{
				"type": "integer", "minimum": 1, "maximum": maxTimeoutMs, "default": defaultTimeoutMs,
				"description": "Timeout of one tool call, in milliseconds.",
			},
			"allowPrivateNetwork": map[string]any{
				"type": "boolean", "default": false,
				"description": "Let tool calls (and the document's fetch) reach loopback, private, link-local and other non-public addresses. The host's own API stays unreachable.",
			},
		},
	}
}

// secretsSchema has one property per security scheme, named as in the
// document. Mutual TLS has no secret a request could carry, so it has none.
func secretsSchema(schemes map[string]securityScheme, doc *openapi3.T) map[string]any {
	props := map[string]any{}
	for name, s := range schemes {
		var desc string
		if doc.Components != nil {
			if ref := doc.Components.SecuritySchemes[name]; ref != nil && ref.Value != nil {
				desc = ref.Value.Description
			}
		}
		str := func(how string) map[string]any {
			return map[string]any{"type": "string", "writeOnly": true, "description": joinText(how, desc)}
		}
		switch {
		case s.Type == "apiKey":
			props[name] = str(fmt.Sprintf("API key, sent in the %s %q.", s.In, s.Name))
		case s.Type == "http" && s.Scheme == "basic":
			props[name] = map[string]any{
				"type":                 "object",
				"description":          joinText("HTTP basic credentials.", desc),
				"additionalProperties": false,
				"required":             []string{"username", "password"},
				"properties": map[string]any{
					"username": map[string]any{"type": "string"},
					"password": map[string]any{"type": "string", "writeOnly": true},
				},
			}
		case s.Type == "http" && s.Scheme == "bearer":
			props[name] = str("Token, sent as \"Authorization: Bearer <token>\".")
		case s.Type == "http":
			props[name] = str(fmt.Sprintf("Credentials, sent as \"Authorization: %s <value>\".", httpSchemeName(s.Scheme)))
		case s.Type == "oauth2" || s.Type == "openIdConnect":
			props[name] = str("Access token, sent as \"Authorization: Bearer <token>\".")
		}
	}
	return map[string]any{
		"$schema":              jsonSchemaDialect,
		"type":                 "object",
		"additionalProperties": false,
		"properties":           props,
	}
}

// httpSchemeName capitalises an HTTP authentication scheme name
// ("digest" → "Digest") for the Authorization header.
func httpSchemeName(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

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

func joinText(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return strings.Join(out, "\n\n")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
