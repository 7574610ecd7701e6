package api

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
)

// TestSpecEnumsMatchTheAPI: exitState and reason list null (the API returns
// it before a first run) and reason lists exactly the module contract's
// reasons, in both renderings.
func TestSpecEnumsMatchTheAPI(t *testing.T) {
	t.Parallel()
	want := []any{}
	for _, r := range module.Reasons {
		want = append(want, string(r))
	}
	want = append(want, nil)
	for _, v30 := range []bool{false, true} {
		raw, err := Spec("json", v30)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			Components struct {
				Schemas map[string]struct {
					Properties map[string]struct {
						Enum []any `json:"enum"`
					} `json:"properties"`
				} `json:"schemas"`
			} `json:"components"`
		}
		if err := json.Unmarshal(raw, &doc); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"Process", "ProcessSummary", "ExitEvent"} {
			props := doc.Components.Schemas[name].Properties
			if got := props["reason"].Enum; !slices.Equal(got, want) {
				t.Errorf("3.0=%v %s.reason enum %v, want %v", v30, name, got, want)
			}
			if got := props["exitState"].Enum; !slices.Contains(got, any(nil)) || !slices.Contains(got, any("timeout")) {
				t.Errorf("3.0=%v %s.exitState enum %v lacks null", v30, name, got)
			}
		}
	}
}
