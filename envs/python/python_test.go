package python

import (
	"context"
	"io"
	"slices"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/envtest"
	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/envs/worker"
)

var eids atomic.Int64

func newEnv(t *testing.T, cfg map[string]any) (*Env, *envtest.Recorder) {
	t.Helper()
	rec := envtest.NewRecorder()
	e := New(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})), worker.Plain{})
	if err := e.Setup(context.Background(), module.SetupContext{Config: cfg, Bindings: rec}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Teardown(context.Background()) })
	return e, rec
}

func run(t *testing.T, e *Env, code string, timeoutMs int64) (int64, module.Result) {
	t.Helper()
	eid := eids.Add(1)
	res, err := e.Execute(context.Background(), module.ExecutionInput{EID: eid, Code: code, Options: module.Options{TimeoutMs: timeoutMs, OutputLimitBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	return eid, res
}

func TestSmoke(t *testing.T) {
	e, rec := newEnv(t, nil)
	eid, res := run(t, e, "print('hi')\ncyrnel.output({'a': 1})\ncyrnel.output({'b': 2})", 5000)
	r := rec.Get(eid)
	if res.Exit != module.ExitSuccess || string(r.Stdout) != "hi\n" || len(r.Output) != 2 {
		t.Fatalf("res=%+v run=%+v stderr=%s", res, r, r.Stderr)
	}
	eid, res = run(t, e, "x = 1\nraise ValueError('boom')", 5000)
	r = rec.Get(eid)
	if res.Exit != module.ExitFailed || r.Errors[0] != "ValueError: boom" || !strings.Contains(string(r.Stderr), "line 2") {
		t.Fatalf("res=%+v run=%+v stderr=%s", res, r, r.Stderr)
	}
	eid, res = run(t, e, "import asyncio\nawait asyncio.sleep(0)\nprint('awaited')", 5000)
	if r = rec.Get(eid); res.Exit != module.ExitSuccess || string(r.Stdout) != "awaited\n" {
		t.Fatalf("res=%+v run=%+v stderr=%s", res, r, r.Stderr)
	}
	start := time.Now()
	_, res = run(t, e, "while True: pass", 300)
	if res.Exit != module.ExitTimeout {
		t.Fatalf("res=%+v", res)
	}
	t.Log("timeout took", time.Since(start))
}

// BenchmarkExecuteWarm measures one trivial execution through the
// environment alone (no HTTP, no database), with the pool refilled between
// executions so each one takes a warm interpreter.
func BenchmarkExecuteWarm(b *testing.B) {
	rec := envtest.NewRecorder()
	e := New(slog.New(slog.NewTextHandler(io.Discard, nil)), worker.Plain{})
	if err := e.Setup(context.Background(), module.SetupContext{Bindings: rec}); err != nil {
		b.Fatal(err)
	}
	defer e.Teardown(context.Background())
	var lat []time.Duration
	for i := range b.N {
		b.StopTimer()
		for e.pool.Stats().Ready < e.cfg.PoolSize {
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
