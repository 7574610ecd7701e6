package typescript

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/envs/sandbox"
)

// TestCgroupsOff: with cgroups turned off (as on a machine without cgroup
// delegation) memory is held by the rlimit fallback, and workers start and
// run programs under it. (Under RLIMIT_AS no worker could start: the Go
// runtime reserves over a gigabyte of address space, and Setup failed with
// "failed to reserve page summary memory".) A memory bomb still ends its
// worker, at its memory limit, long before its timeout; the bomb stops
// itself at four times the limit, so a limit that did not hold ends it
// "success" instead of filling the machine. The next program runs.
func TestCgroupsOff(t *testing.T) {
	t.Parallel()
	relax := sandbox.Relax{Cgroups: true}
	if err := sandbox.Probe().Check(relax); err != nil {
		if why := os.Getenv("CYRNEL_TEST_NO_SANDBOX"); why != "" {
			t.Skipf("kernel forbids a layer: %v (CYRNEL_TEST_NO_SANDBOX: %s)", err, why)
		}
		t.Fatalf("kernel forbids a layer: %v; set CYRNEL_TEST_NO_SANDBOX=<why> on a machine that cannot sandbox", err)
	}
	if m := sandbox.Probe().Layers(relax).Memory; m != sandbox.KindRlimit {
		t.Fatalf("memory held by %q with cgroups off, want rlimit", m)
	}
	// The default limit, except under the race detector, whose shadow
	// memory takes more than that (a worker running a 16 MiB array held
	// 660 MiB of data and 2 GiB of address space: RLIMIT_AS still fails
	// at 1 GiB).
	limitMB := int64(512)
	if raceEnabled {
		limitMB = 1024
	}
	env, rec := newEnv(t, map[string]any{
		"sandbox": map[string]any{"cgroups": false},
		"limits":  map[string]any{"memoryMb": float64(limitMB)},
	})

	wantResult(t, execute(t, env, 1, trivialProgram, 10000), module.ExitSuccess, module.ReasonCompleted)
	if got := rec.Stdout(1); got != "x is 42\n" {
		t.Errorf("stdout = %q, want %q", got, "x is 42\n")
	}

	// Each array holds 2^20 values of 16 bytes or more: 16 MiB at least.
	bomb := fmt.Sprintf(`const a: number[][] = [];
while (a.length < %d) a.push(new Array(1 << 20).fill(1));
console.log("allocated", a.length * 16, "MiB");`, 4*limitMB/16)
	res := execute(t, env, 2, bomb, 120000)
	stderr := rec.Stderr(2)
	t.Logf("bomb: %+v, error %q, stdout %q", res, rec.Error(2), rec.Stdout(2))
	// The worker's runtime says why it ended, and the host reads it: its
	// own fatal error ends the execution at the memory limit. Under the
	// race detector the detector's allocator may fail first, which says
	// nothing the host trusts.
	switch {
	case strings.Contains(stderr, "fatal error: ") && (strings.Contains(stderr, "out of memory") || strings.Contains(stderr, "cannot allocate memory")):
		if res.Exit != module.ExitFailed || res.Reason != module.ReasonMemoryLimit {
			t.Errorf("bomb result = %+v (stdout %q), want failed/memory_limit", res, rec.Stdout(2))
		}
	case raceEnabled && strings.Contains(stderr, "ThreadSanitizer failed to allocate"):
		if res.Exit != module.ExitFailed || res.Reason != module.ReasonEnvironmentError {
			t.Errorf("bomb result = %+v (stdout %q), want failed/environment_error", res, rec.Stdout(2))
		}
	default:
		t.Errorf("bomb %+v, stderr = %.500q: want the runtime's out-of-memory error", res, stderr)
	}

	wantResult(t, execute(t, env, 3, trivialProgram, 10000), module.ExitSuccess, module.ReasonCompleted)
}

// TestWorkerEnv: workers collect a quarter as often as Go's default, and
// their soft memory limit is seven eighths of their hard one.
func TestWorkerEnv(t *testing.T) {
	t.Parallel()
	for mb, want := range map[int64]string{512: "GOMEMLIMIT=448MiB", 128: "GOMEMLIMIT=112MiB"} {
		got := workerEnv(module.LimitsConfig{MemoryMB: mb})
		if !slices.Equal(got, []string{"GOGC=400", want}) {
			t.Errorf("%d MiB: %q", mb, got)
		}
	}
}

// TestHeapNearTheLimitIsCollected: workers run with GOGC=400, whose heap
// target for a program keeping a quarter of its memory limit live would be
// past the limit; GOMEMLIMIT makes the collector run before that, so a
// program that keeps 64 MiB live and allocates four times as much garbage
// under a 256 MiB limit succeeds (with neither setting it failed). The race
// detector's shadow memory, which the collector does not count, takes the
// rest of any limit first.
func TestHeapNearTheLimitIsCollected(t *testing.T) {
	t.Parallel()
	if raceEnabled {
		t.Skip("the race detector's shadow memory is not counted by GOMEMLIMIT")
	}
	env, rec := newEnv(t, map[string]any{"limits": map[string]any{"memoryMb": 256.0}})
	code := `const keep: number[][] = [];
for (let i = 0; i < 4; i++) keep.push(new Array(1 << 20).fill(i));
let n = 0;
for (let i = 0; i < 16; i++) n += new Array(1 << 20).fill(1).length;
console.log(keep.length, n >> 20);`
	res := execute(t, env, 1, code, 120000)
	if res.Exit != module.ExitSuccess {
		t.Fatalf("result %+v, error %q, stderr %.300q", res, rec.Error(1), rec.Stderr(1))
	}
	if got := rec.Stdout(1); got != "4 16\n" {
		t.Errorf("stdout %q", got)
	}
}
