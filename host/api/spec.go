package api

import (
	"bytes"
	"encoding/json"
	"fmt"
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
