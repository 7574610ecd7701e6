package python

import (
	"context"
	"io"
	"log/slog"
	"testing"

	"github.com/cyrnel/cyrnel/envs/envtest"
	"github.com/cyrnel/cyrnel/envs/module"
)

func setupEnv(t *testing.T, config map[string]any) *Env {
	t.Helper()
	e := New(slog.New(slog.NewTextHandler(io.Discard, nil)), testOptions)
	if err := e.Setup(context.Background(), module.SetupContext{Bindings: envtest.NewRecorder(), Config: config}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Teardown(context.Background()) })
	return e
}

// TestCPULimitHoldsTheTree: workers forked by a program share its
// cpuSeconds; the execution fails with cpu_limit and reports at least that
// much CPU time. Each worker alone stays under the limit (the per-process
// RLIMIT_CPU of before let this program succeed after 2.4 CPU-seconds).
func TestCPULimitHoldsTheTree(t *testing.T) {
	t.Parallel()
	e := setupEnv(t, map[string]any{"poolSize": 1.0, "limits": map[string]any{"cpuSeconds": 1.0}})
	res, err := e.Execute(context.Background(), module.ExecutionInput{EID: 1, Code: envtest.ForkBurn, Options: module.Options{TimeoutMs: 60000}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Exit != module.ExitFailed || res.Reason != module.ReasonCPULimit || res.CPUMs < 1000 {
		t.Errorf("got %+v, want failed/cpu_limit after at least 1000 ms of CPU", res)
	}
}

// TestUsageReported: an execution's result carries its CPU time and peak
// memory from the sandbox's cgroups; a program holding 96 MiB peaks above
// that, a trivial one (the control, from a fresh interpreter too) below.
func TestUsageReported(t *testing.T) {
	t.Parallel()
	e := setupEnv(t, map[string]any{"poolSize": 1.0})
	run := func(eid int64, code string) module.Result {
		res, err := e.Execute(context.Background(), module.ExecutionInput{EID: eid, Code: code, Options: module.Options{TimeoutMs: 30000}})
		if err != nil || res.Exit != module.ExitSuccess {
			t.Fatalf("%q: %+v %v", code, res, err)
		}
		return res
	}
	big := run(1, "import time\nx = bytearray(96 << 20)\nend = time.process_time() + 0.2\nwhile time.process_time() < end:\n    pass")
	small := run(2, "pass")
	if big.PeakMemoryBytes < 96<<20 || big.CPUMs < 200 {
		t.Errorf("big: peak %d bytes, %d ms of CPU; want at least 96 MiB and 200 ms", big.PeakMemoryBytes, big.CPUMs)
	}
	if small.PeakMemoryBytes <= 0 || small.PeakMemoryBytes >= 96<<20 {
		t.Errorf("control: a trivial program peaks at %d bytes", small.PeakMemoryBytes)
	}
}
