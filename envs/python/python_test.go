package python

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/envtest"
	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/envs/worker"
)

// BenchmarkExecuteWarm measures one trivial execution through the
// environment alone (no HTTP, no database), with the pool refilled between
// executions so each one takes a warm interpreter.
func BenchmarkExecuteWarm(b *testing.B) {
	rec := envtest.NewRecorder()
	e := New(slog.New(slog.NewTextHandler(io.Discard, nil)), testOptions)
	if err := e.Setup(context.Background(), module.SetupContext{Bindings: rec}); err != nil {
		b.Fatal(err)
	}
	defer e.Teardown(context.Background())
	var lat []time.Duration
	for i := range b.N {
		b.StopTimer()
		for e.Status()["pool"].(worker.Stats).Ready < e.cfg.PoolSize {
			time.Sleep(time.Millisecond)
		}
		b.StartTimer()
		t0 := time.Now()
		res, err := e.Execute(context.Background(), module.ExecutionInput{EID: int64(i + 1), Code: "pass", Options: module.Options{TimeoutMs: 5000}})
		lat = append(lat, time.Since(t0))
		if err != nil || res.Exit != module.ExitSuccess {
			b.Fatal(res, err)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
}

// BenchmarkSpawnToReady: one sandboxed interpreter from launch until it is
// warm (runtime and preload imported), spawned and forked from a template,
// with and without asyncio preloaded: what every fresh-interpreter execution
// costs the machine.
func BenchmarkSpawnToReady(b *testing.B) {
	for _, fork := range []bool{false, true} {
		for _, preload := range [][]string{{"asyncio"}, {}} {
			name := map[bool]string{false: "spawn", true: "fork"}[fork] + "/preload-asyncio"
			if len(preload) == 0 {
				name = strings.Replace(name, "asyncio", "none", 1)
			}
			b.Run(name, func(b *testing.B) {
				e := New(slog.New(slog.NewTextHandler(io.Discard, nil)), testOptions)
				if err := e.Setup(context.Background(), module.SetupContext{Bindings: envtest.NewRecorder(), Config: map[string]any{"preload": preload, "poolSize": 1, "fork": fork}}); err != nil {
					b.Fatal(err)
				}
				defer e.Teardown(context.Background())
				if fork && e.forking == nil {
					b.Skipf("no template: %s", e.tplWhy)
				}
				b.ResetTimer()
				for range b.N {
					w, err := e.spawn(context.Background())
					if err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					w.Close()
					b.StartTimer()
				}
			})
		}
	}
}
