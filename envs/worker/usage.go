package worker

import (
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
)

// Accounting is implemented by handles whose launcher counts what the
// worker's whole process tree uses, from counters the worker cannot touch
// (the sandbox's cgroups).
type Accounting interface {
	// ResetUsage starts the counts, and the tree-wide CPU limit, over: a
	// worker serving several executions accounts for each alone.
	ResetUsage()
	// Usage is the CPU time and the peak memory since the last reset.
	Usage() (cpu time.Duration, peakMemoryBytes int64)
}

// resetUsage starts an execution's accounting.
func (w *Worker) resetUsage() {
	if a, ok := w.h.(Accounting); ok {
		a.ResetUsage()
	}
}

// withUsage fills in what the execution used, as the launcher counted it.
func (w *Worker) withUsage(res module.Result) module.Result {
	if a, ok := w.h.(Accounting); ok {
		cpu, peak := a.Usage()
		res.CPUMs, res.PeakMemoryBytes = cpu.Milliseconds(), peak
	}
	return res
}

// limitEnded says why a worker that had already ended when its execution
// timed out or was killed ended, if a resource limit ended it: the limit
// is the precise reason, whichever of the two the host saw first.
func (w *Worker) limitEnded() (module.Result, string, bool) {
	if !w.Dead() {
		return module.Result{}, "", false
	}
	if x := w.h.Exit(); x.MemoryLimit || x.CPULimit || w.outOfMemory.Load() {
		res, msg := w.died()
		return res, msg, true
	}
	return module.Result{}, "", false
}
