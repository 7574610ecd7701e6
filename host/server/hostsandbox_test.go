package server

import (
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/envs/sandbox"
)

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
		h, err := checkHostSandbox(s, false)
		if (err == nil) != (c.missing == nil) || h.Cgroups != (c.missing == nil) || len(h.Missing) != len(c.missing) {
			t.Errorf("%+v: %+v %v", c, h, err)
		}
		for _, m := range c.missing {
			if err == nil || !strings.Contains(err.Error(), m+": no cgroup mount") || !strings.Contains(err.Error(), "--allow-unsandboxed") {
				t.Errorf("%+v: %v, want it to name %s and the flag", c, err, m)
			}
		}
		// The operator's flag lets the host start, saying what is missing.
		h, err = checkHostSandbox(s, true)
		if err != nil || !h.AllowUnsandboxed || len(h.Missing) != len(c.missing) {
			t.Errorf("%+v allowed: %+v %v", c, h, err)
		}
	}
}
