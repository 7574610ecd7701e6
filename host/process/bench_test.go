package process

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/store"
)

// instant runs every execution at once, as the fastest environment would.
type instant struct{ m *Manager }

func (x *instant) Execute(_ context.Context, in module.ExecutionInput) (string, module.Result, error) {
	x.m.SetState(in.EID, module.StateRunning)
	x.m.EmitStdout(in.EID, []byte("hi\n"))
	return "instant", module.Result{Exit: module.ExitSuccess}, nil
}
func (x *instant) Kill(context.Context, int64) error { return nil }

// BenchmarkHostOverhead: what the host adds to an execution (create, three
// writes, wait, read) on real SQLite, with an environment that takes no time.
func BenchmarkHostOverhead(b *testing.B) {
	st, err := store.Open(context.Background(), "", b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	x := &instant{}
	m := New(slog.New(slog.NewTextHandler(io.Discard, nil)), st, x, DefaultLimits(), "test-host", 0)
	defer m.Shutdown(context.Background())
	x.m = m
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		p, err := m.Create(ctx, CreateInput{Code: "pass", Autorun: true})
		if err != nil {
			b.Fatal(err)
		}
		if p, err = m.Wait(ctx, p.PID, 10*time.Second); err != nil || p.State != Idle {
			b.Fatal(p, err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
}
