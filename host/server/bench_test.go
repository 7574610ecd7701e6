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

	"github.com/cyrnel/cyrnel/host/process"
)

// BenchmarkExecutionHTTP: a trivial TypeScript execution through the whole
// host in one process (HTTP on loopback, SQLite, a sandboxed worker), for
// profiling the warm path with -cpuprofile.
func BenchmarkExecutionHTTP(b *testing.B) {
	ctx := context.Background()
	s, err := New(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), Config{
		Addr: "127.0.0.1:0", DataDir: b.TempDir(), Limits: process.DefaultLimits(), Environment: "typescript",
	})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	body := []byte(`{"code":"const x: number = 1;","waitMs":10000}`)
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
		t0 := time.Now()
		post()
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
}
