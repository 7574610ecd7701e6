package openapi

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

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
