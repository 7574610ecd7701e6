package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/envs/worker"
	"github.com/cyrnel/cyrnel/host/adapters"
	"github.com/cyrnel/cyrnel/host/gate"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/services"
	"github.com/cyrnel/cyrnel/host/tracing"
)

// BenchmarkExecutionHTTP: a trivial execution through the whole host in one
// process (HTTP on loopback, SQLite, a sandboxed worker), for profiling the
// warm path with -cpuprofile. Python waits for a refilled pool (untimed)
// before each execution. The -traced runs export every span over
// OTLP/HTTP to a loopback receiver that discards them: the cost of tracing.
func BenchmarkExecutionHTTP(b *testing.B) {
	const ts, py = `{"code":"const x: number = 1;","waitMs":10000}`, `{"code":"pass","waitMs":10000}`
	b.Run("typescript", func(b *testing.B) { benchExecution(b, "typescript", ts, false) })
	b.Run("python", func(b *testing.B) { benchExecution(b, "python", py, false) })
	b.Run("typescript-traced", func(b *testing.B) { benchExecution(b, "typescript", ts, true) })
	b.Run("python-traced", func(b *testing.B) { benchExecution(b, "python", py, true) })
}

// otlpSink is an OTLP/HTTP endpoint that takes every export and keeps
// nothing.
func otlpSink(b *testing.B) string {
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(sink.Close)
	return sink.URL
}

func benchExecution(b *testing.B, env, request string, traced bool) {
	ctx := context.Background()
	cfg := Config{Addr: "127.0.0.1:0", DataDir: b.TempDir(), Limits: process.DefaultLimits(), Environment: env, APIKey: "bench"}
	if traced {
		b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", otlpSink(b))
		var err error
		if cfg.Tracing, err = tracing.FromEnv(ctx, "bench"); err != nil || !cfg.Tracing.Enabled {
			b.Fatalf("tracing: %v", err)
		}
	}
	s, err := New(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	body := []byte(request)
	post := func() {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/processes", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer bench")
		resp, err := http.DefaultClient.Do(req)
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
	cpu0 := hostCPU(b)
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
	b.StopTimer()
	if traced {
		// The spans still batched are exported within the measure.
		if err := cfg.Tracing.TracerProvider.(interface{ ForceFlush(context.Context) error }).ForceFlush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-us")
	// The host's CPU per execution (the workers' is not in it) is steadier
	// than latency on a loaded machine: the cost of tracing is read here.
	b.ReportMetric(float64((hostCPU(b)-cpu0).Microseconds())/float64(b.N), "host-cpu-us/op")
}

// hostCPU is the CPU this process (the host, and the benchmark's client and
// OTLP sink) has used so far.
func hostCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// petsHost is a host in one process with the petstore imported as service
// pets, its tools calling a loopback API that answers at once.
func petsHost(b *testing.B) (*Server, *httptest.Server) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":1}`))
	}))
	b.Cleanup(up.Close)
	ctx := context.Background()
	s, err := New(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), Config{Addr: "127.0.0.1:0", DataDir: b.TempDir(), Limits: process.DefaultLimits()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	doc, err := os.ReadFile("testdata/petstore-3.0.yaml")
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.services.Create(ctx, services.CreateInput{ID: "pets", Adapter: "openapi", Source: adapters.Source{Content: string(doc)},
		Config: map[string]any{"serverUrl": up.URL, "allowPrivateNetwork": true}}); err != nil {
		b.Fatal(err)
	}
	return s, up
}

// BenchmarkToolCallFromPython: one program making b.N sequential tool calls
// through the host to the openapi adapter and a loopback API, for profiling
// the host's side of a tool call with -cpuprofile.
func BenchmarkToolCallFromPython(b *testing.B) {
	ctx := context.Background()
	s, _ := petsHost(b)
	code := fmt.Sprintf("f = cyrnel.services.pets.showPetById\nfor _ in range(%d):\n    f(petId='1')", b.N)
	b.ResetTimer()
	p, err := s.procs.Create(ctx, process.CreateInput{Code: code, Autorun: true, TimeoutMs: 600000})
	if err != nil {
		b.Fatal(err)
	}
	if p, err = s.procs.Wait(ctx, p.PID, 10*time.Minute); err != nil || *p.ExitState != "success" {
		b.Fatal(p, err)
	}
}

// BenchmarkToolCallInHost: the host's side of a tool call without the
// program (the gate: policy, validation, the adapter's HTTP request, the
// audit record) next to the same request made directly, in one run.
func BenchmarkToolCallInHost(b *testing.B) {
	ctx := context.Background()
	s, up := petsHost(b)
	in := module.InvokeInput{ServiceID: "pets", ToolID: "showPetById", Parameters: map[string]any{"petId": "1"}}
	var viaGate, direct []time.Duration
	client := &http.Client{}
	for range b.N {
		t0 := time.Now()
		if _, err := s.gate.Invoke(ctx, gate.FromCode, in); err != nil {
			b.Fatal(err)
		}
		viaGate = append(viaGate, time.Since(t0))
		t0 = time.Now()
		resp, err := client.Get(up.URL + "/pets/1")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		direct = append(direct, time.Since(t0))
	}
	slices.Sort(viaGate)
	slices.Sort(direct)
	b.ReportMetric(float64(viaGate[len(viaGate)/2].Microseconds()), "gate-p50-us")
	b.ReportMetric(float64(direct[len(direct)/2].Microseconds()), "direct-p50-us")
}
