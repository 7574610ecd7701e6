package server

import (
	"fmt"
	"strings"

	"github.com/cyrnel/cyrnel/envs/sandbox"
	"github.com/cyrnel/cyrnel/host/modules"
)

// checkHostSandbox refuses to start a host on a machine where no memory or
// no pids cgroup is usable, naming which and why, unless the operator
// allowed running without (allow): a program's memory and processes would
// then be bounded only per process. It reports what is in force.
func checkHostSandbox(s sandbox.Support, allow bool) (modules.HostSandbox, error) {
	h := modules.HostSandbox{AllowUnsandboxed: allow, Cgroups: s.Memory.OK() && s.Pids.OK(), Missing: []string{}}
	if !s.Memory.OK() {
		h.Missing = append(h.Missing, "memory cgroup: "+s.Memory.Err)
	}
	if !s.Pids.OK() {
		h.Missing = append(h.Missing, "pids cgroup: "+s.Pids.Err)
	}
	if len(h.Missing) > 0 && !allow {
		return h, fmt.Errorf("refusing to start: this machine lacks sandbox layers (%s), without which a program's memory and processes are bounded only per process; give the server a usable cgroup hierarchy (e.g. mount /sys/fs/cgroup, or delegate a subtree with systemd Delegate=yes), or start it with --allow-unsandboxed (CYRNEL_ALLOW_UNSANDBOXED=1) to run without them",
			strings.Join(h.Missing, "; "))
	}
	return h, nil
}
