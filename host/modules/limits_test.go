package modules

import (
	"errors"
	"slices"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/schema"
)

func TestCheckLimits(t *testing.T) {
	t.Parallel()
	m := module.Machine{MemoryBytes: 4 << 30, Processes: 32768, OpenFiles: 1 << 20}
	for _, c := range []struct {
		limits map[string]any
		fields []string
	}{
		{nil, nil},
		{map[string]any{"memoryMb": 4096, "processes": 32768, "cpuSeconds": 3600, "tmpMb": 4096, "openFiles": 1 << 20}, nil},
		{map[string]any{"memoryMb": 4097}, []string{"/memoryMb"}},
		{map[string]any{"memoryMb": 65536, "processes": 65536, "cpuSeconds": 86400}, []string{"/memoryMb", "/processes", "/cpuSeconds"}},
		{map[string]any{"tmpMb": 8192, "openFiles": 1<<20 + 1}, []string{"/tmpMb", "/openFiles"}},
	} {
		cfg := map[string]any{}
		if c.limits != nil {
			cfg["limits"] = c.limits
		}
		err := CheckLimits(cfg, m)
		var fe *schema.FieldError
		if c.fields == nil {
			if err != nil {
				t.Errorf("%v: %v", c.limits, err)
			}
			continue
		}
		if !errors.As(err, &fe) || fe.Field != "config.limits" {
			t.Fatalf("%v: %v, want a FieldError at config.limits", c.limits, err)
		}
		var got []string
		for _, p := range fe.Problems {
			got = append(got, p.Path)
		}
		if !slices.Equal(got, c.fields) {
			t.Errorf("%v: problems at %v, want %v", c.limits, got, c.fields)
		}
	}
	// Unknown figures check nothing.
	if err := CheckLimits(map[string]any{"limits": map[string]any{"memoryMb": 1 << 20}}, module.Machine{}); err != nil {
		t.Error(err)
	}
}
