package openapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
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
	input, err := d.inputSchema(o, &td)
	if err != nil {
		return adapters.ToolDefinition{}, err
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

// inputSchema is the tool's input: one property per parameter, and "body"
// for the request body. It records in td how each reaches the request.
func (d *definer) inputSchema(o operation, td *toolDomain) (map[string]any, error) {
	params := mergeParams(o.item.Parameters, o.op.Parameters)
	var rb *openapi3.RequestBody
	if o.op.RequestBody != nil {
		rb = o.op.RequestBody.Value
	}
	names := propertyNames(params, rb != nil)

	dp := deps{}
	props := map[string]any{}
	var required []string
	for i, p := range params {
		pd, sch, err := d.param(p, names[i], dp)
		if err != nil {
			return nil, err
		}
		props[pd.Property] = sch
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
		return nil, fmt.Errorf("input schema: %w", err)
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
	return input, nil
}

// param is how parameter p reaches the request, as the tool's property
// named property, and that property's schema.
func (d *definer) param(p *openapi3.Parameter, property string, dp deps) (param, any, error) {
	sm, err := p.SerializationMethod()
	if err != nil {
		return param{}, nil, fmt.Errorf("parameter %q: %w", p.Name, err)
	}
	pd := param{Property: property, In: p.In, Name: p.Name, Style: sm.Style, Explode: sm.Explode, AllowReserved: p.AllowReserved}
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
	return pd, annotate(sch, p.Description, p.Deprecated), nil
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
