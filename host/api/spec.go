package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/danielgtaylor/huma/v2"
)

// Spec renders the API's OpenAPI document: format json or yaml, 3.1 or (v30)
// the 3.0 rendering. The JSON forms are indented so committed copies diff
// well.
func Spec(format string, v30 bool) ([]byte, error) {
	_, a := New(Deps{})
	o := a.OpenAPI()
	switch {
	case format == "yaml" && v30:
		return o.DowngradeYAML()
	case format == "yaml":
		return o.YAML()
	case format != "json":
		return nil, fmt.Errorf("spec format %q: want json or yaml", format)
	}
	var raw []byte
	var err error
	if v30 {
		raw, err = o.Downgrade()
	} else {
		raw, err = json.Marshal(o)
	}
	if err != nil {
		return nil, fmt.Errorf("render spec: %w", err)
	}
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
