package modules

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/envs/sandbox"
	"github.com/cyrnel/cyrnel/envs/worker"
	"github.com/cyrnel/cyrnel/host/schema"
)

func TestCheckLimits(t *testing.T) {
	t.Parallel()
	m := worker.Machine{MemoryBytes: 4 << 30, Processes: 32768, OpenFiles: 1 << 20}
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
	if err := CheckLimits(map[string]any{"limits": map[string]any{"memoryMb": 1 << 20}}, worker.Machine{}); err != nil {
		t.Error(err)
	}
}

func TestCheckHostSandbox(t *testing.T) {
	t.Parallel()
	ok := sandbox.CgroupSupport{Version: 2, Dir: "/sys/fs/cgroup/x"}
	gone := sandbox.CgroupSupport{Err: "no cgroup mount"}
	for _, c := range []struct {
		memory, pids sandbox.CgroupSupport
		missing      []string
	}{
		{ok, ok, nil},
		{gone, ok, []string{"memory cgroup"}},
		{ok, gone, []string{"pids cgroup"}},
		{gone, gone, []string{"memory cgroup", "pids cgroup"}},
	} {
		s := sandbox.Support{Memory: c.memory, Pids: c.pids}
		h, err := CheckHostSandbox(s, false)
		if (err == nil) != (c.missing == nil) || h.Cgroups != (c.missing == nil) || len(h.Missing) != len(c.missing) {
			t.Errorf("%+v: %+v %v", c, h, err)
		}
		for _, m := range c.missing {
			if err == nil || !strings.Contains(err.Error(), m+": no cgroup mount") || !strings.Contains(err.Error(), "--allow-unsandboxed") {
				t.Errorf("%+v: %v, want it to name %s and the flag", c, err, m)
			}
		}
		// The operator's flag lets the host start, saying what is missing.
		h, err = CheckHostSandbox(s, true)
		if err != nil || !h.AllowUnsandboxed || len(h.Missing) != len(c.missing) {
			t.Errorf("%+v allowed: %+v %v", c, h, err)
		}
	}
}
