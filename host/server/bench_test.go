package server

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/worker"
	"github.com/cyrnel/cyrnel/host/process"
)

// BenchmarkExecutionHTTP: a trivial execution through the whole host in one
// process (HTTP on loopback, SQLite, a sandboxed worker), for profiling the
// warm path with -cpuprofile. Python waits for a refilled pool (untimed)
// before each execution.
func BenchmarkExecutionHTTP(b *testing.B) {
	b.Run("typescript", func(b *testing.B) { benchExecution(b, "typescript", `{"code":"const x: number = 1;","waitMs":10000}`) })
	b.Run("python", func(b *testing.B) { benchExecution(b, "python", `{"code":"pass","waitMs":10000}`) })
}

func benchExecution(b *testing.B, env, request string) {
	ctx := context.Background()
	s, err := New(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), Config{
		Addr: "127.0.0.1:0", DataDir: b.TempDir(), Limits: process.DefaultLimits(), Environment: env,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	body := []byte(request)
	post := func() {
		resp, err := http.Post(srv.URL+"/processes", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		var p struct {
			ExitState string `json:"exitState"`
		}
		json.NewDecoder(resp.Body).Decode(&p)
		resp.Body.Close()
		if p.ExitState != "success" {
			b.Fatalf("exit %q", p.ExitState)
		}
	}
	post()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		if env == "python" {
			b.StopTimer()
			for {
				active, _, _ := s.modules.Status()
				if st, ok := active.Status["pool"].(worker.Stats); ok && st.Ready == st.Size {
					break
				}
				time.Sleep(time.Millisecond)
			}
			b.StartTimer()
		}
		t0 := time.Now()
		post()
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
}
