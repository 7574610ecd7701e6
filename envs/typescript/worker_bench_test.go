package typescript

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/sourcegraph/jsonrpc2"
)

type noCalls struct{}

func (noCalls) Handle(context.Context, *jsonrpc2.Conn, *jsonrpc2.Request) {}

type pipes struct {
	r *os.File
	w *os.File
}

func (p pipes) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p pipes) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p pipes) Close() error                { p.w.Close(); return p.r.Close() }

// BenchmarkWorkerRoundTrip: one execute of a trivial program through the
// worker protocol over real pipes, in one process (no sandbox, no spawn).
func BenchmarkWorkerRoundTrip(b *testing.B) {
	toR, toW, _ := os.Pipe()
	fromR, fromW, _ := os.Pipe()
	go ServeWorker(toR, fromW)
	conn := jsonrpc2.NewConn(context.Background(), jsonrpc2.NewPlainObjectStream(pipes{fromR, toW}), noCalls{})
	defer conn.Close()
	params := map[string]any{"eid": 1, "code": "const x: number = 1;", "timeoutMs": 5000}
	var out map[string]any
	conn.Call(context.Background(), "execute", params, &out)
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if err := conn.Call(context.Background(), "execute", params, &out); err != nil || out["status"] != "success" {
			b.Fatal(out, err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
}
