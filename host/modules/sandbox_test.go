package modules

import (
	"errors"
	"slices"
	"testing"
)

func TestCheckSandbox(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		cfg  map[string]any
		weak []string
	}{
		{nil, nil},
		{map[string]any{"preload": []any{"json"}}, nil},
		{map[string]any{"sandbox": map[string]any{}}, nil},
		{map[string]any{"sandbox": map[string]any{"enabled": true, "network": false, "seccomp": true}}, nil},
		{map[string]any{"sandbox": map[string]any{"enabled": false}}, []string{"sandbox.enabled"}},
		{map[string]any{"sandbox": map[string]any{"network": true}}, []string{"sandbox.network"}},
		{map[string]any{"sandbox": map[string]any{"namespaces": false, "landlock": false, "seccomp": false, "cgroups": false}},
			[]string{"sandbox.namespaces", "sandbox.landlock", "sandbox.seccomp", "sandbox.cgroups"}},
	} {
		err := CheckSandbox(c.cfg, false)
		var ue *UnsandboxedError
		switch {
		case c.weak == nil && err != nil:
			t.Errorf("%v: %v", c.cfg, err)
		case c.weak != nil && (!errors.As(err, &ue) || !errors.Is(err, ErrUnsandboxed) || !slices.Equal(ue.Fields, c.weak)):
			t.Errorf("%v: %v, want %v", c.cfg, err, c.weak)
		}
		// The operator's flag lets every one of them through.
		if err := CheckSandbox(c.cfg, true); err != nil {
			t.Errorf("%v allowed: %v", c.cfg, err)
		}
	}
}
