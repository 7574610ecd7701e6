package sandbox

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cyrnel/cyrnel/envs/affinity"
	"github.com/cyrnel/cyrnel/envs/envtest"
)

// TestTemplateStartsOffTheHostsPin: a template started while the host is
// pinned to one CPU (envs/affinity) holds the host's own CPUs: one that
// inherited the pin would keep every program it forks on one CPU. Not
// parallel: it pins this whole process for a moment.
func TestTemplateStartsOffTheHostsPin(t *testing.T) {
	needTemplate(t)
	var own unix.CPUSet
	if err := unix.SchedGetaffinity(0, &own); err != nil {
		t.Fatal(err)
	}
	envtest.Follower(t)
	if err := affinity.Process.To(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = affinity.Process.Release() }()
	if pinned := affinity.Process.CPU() >= 0; pinned != (own.Count() > 1) {
		t.Fatalf("with %d CPUs and a follower, pinned: %v", own.Count(), pinned)
	}
	tpl := startTemplate(t, Limits{})
	var got unix.CPUSet
	if err := unix.SchedGetaffinity(tpl.Pid(), &got); err != nil {
		t.Fatal(err)
	}
	if got != own {
		t.Errorf("the template holds %d CPUs, the host's own are %d", got.Count(), own.Count())
	}
}
