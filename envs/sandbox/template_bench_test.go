package sandbox

import (
	"slices"
	"testing"
	"time"
)

// BenchmarkTemplateFork: one child forked, locked down and ready, one
// trivial program run, the child gone; p50 of each phase.
func BenchmarkTemplateFork(b *testing.B) {
	tpl := startTemplate(b, Limits{})
	var ready, ran, gone []time.Duration
	for range b.N {
		t0 := time.Now()
		f := fork(b, tpl)
		ready = append(ready, time.Since(t0))
		t1 := time.Now()
		f.run(b, "pass")
		ran = append(ran, time.Since(t1))
		t2 := time.Now()
		_ = f.p.Kill()
		f.p.Wait()
		gone = append(gone, time.Since(t2))
	}
	b.ReportMetric(median(ready), "ready-p50-ms")
	b.ReportMetric(median(ran), "run-p50-ms")
	b.ReportMetric(median(gone), "gone-p50-ms")
}

// BenchmarkTemplateForkSession: a session's child forked, locked down and
// ready, then gone (a session's creation, less the host's side); p50.
func BenchmarkTemplateForkSession(b *testing.B) {
	tpl := startTemplate(b, Limits{})
	var ready []time.Duration
	for range b.N {
		t0 := time.Now()
		f := forkWith(b, tpl.ForkSession)
		ready = append(ready, time.Since(t0))
		_ = f.p.Kill()
		f.p.Wait()
	}
	b.ReportMetric(median(ready), "ready-p50-ms")
}

// median in milliseconds.
func median(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}
