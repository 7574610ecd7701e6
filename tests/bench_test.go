package tests

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// median of durations, in milliseconds.
func p50(d []time.Duration) float64 { return percentile(d, 50) }

func percentile(d []time.Duration, pct int) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*pct + 99) / 100
	return float64(s[max(i-1, 0)].Microseconds()) / 1000
}

// waitPoolFull waits (untimed) until the pool is refilled, so each timed
// execution measures the warm path rather than a refill.
func waitPoolFull(b *testing.B, h *host) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var env struct {
			Active struct {
				Status struct {
					Pool struct {
						Size  int `json:"size"`
						Ready int `json:"ready"`
					} `json:"pool"`
				} `json:"status"`
			} `json:"active"`
		}
		h.do("GET", "/environment", nil, &env)
		if p := env.Active.Status.Pool; p.Size > 0 && p.Ready == p.Size {
			return
		}
		time.Sleep(time.Millisecond)
	}
	b.Fatal("pool did not refill within 30s")
}

// BenchmarkWarmExecutionVsSpawn reports, in one run, the median latency of a
// trivial program through the HTTP API (POST /processes with waitMs, warm
// pool) and of spawning `python3 -c pass`, and their ratio.
func BenchmarkWarmExecutionVsSpawn(b *testing.B) {
	h := start(b, "")
	python, err := exec.LookPath("python3")
	if err != nil {
		b.Fatal(err)
	}
	real, err := exec.Command(python, "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		b.Fatal(err)
	}
	realPython := strings.TrimSpace(string(real))
	h.run("pass", nil) // first request pays connection set-up
	var warm, spawn, spawnReal []time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		waitPoolFull(b, h)
		b.StartTimer()
		t0 := time.Now()
		p := h.run("pass", nil)
		warm = append(warm, time.Since(t0))
		if p.exit() != "success" {
			b.Fatalf("%+v", p)
		}
		t0 = time.Now()
		if err := exec.Command(python, "-c", "pass").Run(); err != nil {
			b.Fatal(err)
		}
		spawn = append(spawn, time.Since(t0))
		t0 = time.Now()
		if err := exec.Command(realPython, "-c", "pass").Run(); err != nil {
			b.Fatal(err)
		}
		spawnReal = append(spawnReal, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(p50(warm), "warm-p50-ms")
	b.ReportMetric(percentile(warm, 99), "warm-p99-ms")
	b.ReportMetric(p50(spawn), "python3-c-p50-ms")
	b.ReportMetric(p50(spawnReal), "python-real-c-p50-ms")
	b.ReportMetric(p50(spawn)/p50(warm), "speedup-x")
	b.ReportMetric(p50(spawnReal)/p50(warm), "speedup-vs-real-x")
	b.Log(fmt.Sprintf("warm HTTP p50 %.2f ms; python3 -c pass p50 %.2f ms (real interpreter %.2f ms); %.1fx",
		p50(warm), p50(spawn), p50(spawnReal), p50(spawn)/p50(warm)))
}
