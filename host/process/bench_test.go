package process

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
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

// BenchmarkHostOverhead: what the host adds to an execution (create with a
// wait: its writes, the wait, the answer) on real SQLite, with an
// environment that takes no time; alone, and from 8 clients at once, where
// the writer commits concurrent writes together.
func BenchmarkHostOverhead(b *testing.B) {
	for _, clients := range []int{1, 8} {
		b.Run(map[int]string{1: "serial", 8: "8-clients"}[clients], func(b *testing.B) {
			st, err := store.Open(context.Background(), "", b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			x := &instant{}
			m := New(slog.New(slog.NewTextHandler(io.Discard, nil)), st, x, DefaultLimits(), "test-host", 0, With{})
			if err := m.Start(context.Background()); err != nil {
				b.Fatal(err)
			}
			defer m.Stop(context.Background()) //nolint:errcheck // it waits without a deadline
			x.m = m
			ctx := context.Background()
			var mu sync.Mutex
			lat := make([]time.Duration, 0, b.N)
			var wg sync.WaitGroup
			b.ResetTimer()
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := c; i < b.N; i += clients {
						t0 := time.Now()
						p, err := m.Create(ctx, CreateInput{Code: "pass", Autorun: true, Wait: 10 * time.Second})
						if err != nil || p.State != Idle {
							b.Error(p, err)
							return
						}
						mu.Lock()
						lat = append(lat, time.Since(t0))
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "executions/s")
		})
	}
}
