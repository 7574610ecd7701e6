package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/yaml"
)

// Spec renders the API's OpenAPI document: format json or yaml, 3.1 or (v30)
// the 3.0 rendering. The JSON forms are indented so committed copies diff
// well.
func Spec(format string, v30 bool) ([]byte, error) {
	_, a := New(Deps{})
	o := a.OpenAPI()
	if v30 {
		return Spec30(o, format)
	}
	switch format {
	case "yaml":
		return o.YAML()
	case "json":
		raw, err := json.Marshal(o)
		if err != nil {
			return nil, fmt.Errorf("render spec: %w", err)
		}
		return indent(raw)
	}
	return nil, fmt.Errorf("spec format %q: want json or yaml", format)
}

// Spec30 renders o as an OpenAPI 3.0.3 document, json or yaml.
func Spec30(o *huma.OpenAPI, format string) ([]byte, error) {
	raw, err := downgrade30(o)
	if err != nil {
		return nil, err
	}
	switch format {
	case "json":
		return indent(raw)
	case "yaml":
		var out bytes.Buffer
		if err := yaml.Convert(&out, bytes.NewReader(raw)); err != nil {
			return nil, fmt.Errorf("render spec: %w", err)
		}
		return out.Bytes(), nil
	}
	return nil, fmt.Errorf("spec format %q: want json or yaml", format)
}

func indent(raw []byte) ([]byte, error) {
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return nil, fmt.Errorf("render spec: %w", err)
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// nullEnums adds null to the enum of every nullable enum property: JSON
// Schema checks enum whatever the type says, so without it generators
// (@hey-api/openapi-ts, oapi-codegen) type exitState and reason as never
// null although the API returns null before a process's first run.
func nullEnums(o *huma.OpenAPI) {
	var walk func(s *huma.Schema)
	walk = func(s *huma.Schema) {
		if s == nil {
			return
		}
		if s.Nullable && len(s.Enum) > 0 && !slices.Contains(s.Enum, any(nil)) {
			s.Enum = append(s.Enum, nil)
		}
		for _, p := range s.Properties {
			walk(p)
		}
		walk(s.Items)
	}
	for _, s := range o.Components.Schemas.Map() {
		walk(s)
	}
}
