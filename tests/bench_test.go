package tests

import (
	"database/sql"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/host/pgtest"
)

// median of durations, in milliseconds.
func p50(d []time.Duration) float64 { return percentile(d, 50) }

func percentile(d []time.Duration, pct int) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*pct + 99) / 100
	return float64(s[max(i-1, 0)].Microseconds()) / 1000
}

// waitPoolFull waits (untimed) until the pools are refilled (a spawn made
// for a waiter can leave one over), so each timed execution measures the
// warm path rather than a refill: the pool, and asyncioPool where asyncio
// is preloaded.
func waitPoolFull(b testing.TB, h *host) {
	type pool struct {
		Size  int `json:"size"`
		Ready int `json:"ready"`
	}
	full := func(p *pool) bool { return p == nil || p.Ready >= p.Size }
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var env struct {
			Active struct {
				Status struct {
					Pool    *pool `json:"pool"`
					Asyncio *pool `json:"asyncioPool"`
				} `json:"status"`
			} `json:"active"`
		}
		h.do("GET", "/environment", nil, &env)
		if st := env.Active.Status; st.Pool != nil && st.Pool.Size > 0 && full(st.Pool) && full(st.Asyncio) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	b.Fatal("pool did not refill within 30s")
}

// waitSettled waits until no environment drains and the active one's pool
// is full.
func waitSettled(b testing.TB, h *host) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var env struct {
			Draining []any `json:"draining"`
		}
		h.do("GET", "/environment", nil, &env)
		if len(env.Draining) == 0 {
			waitPoolFull(b, h)
			return
		}
		time.Sleep(time.Millisecond)
	}
	b.Fatal("the previous environment did not drain within 30s")
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
	b.Logf("warm HTTP p50 %.2f ms; python3 -c pass p50 %.2f ms (real interpreter %.2f ms); %.1fx",
		p50(warm), p50(spawn), p50(spawnReal), p50(spawn)/p50(warm))
}

// serverRSS reads the host process's resident memory in KiB.
func serverRSS(b *testing.B, h *host) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", h.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// load runs n trivial executions from c concurrent clients and returns each
// one's latency and the wall time.
func load(b *testing.B, h *host, n, c int, code string) ([]time.Duration, time.Duration) {
	return loadAcross(b, []*host{h}, n, c, code)
}

// BenchmarkThroughput: fresh interpreters, 8 concurrent clients; executions
// per second sustained and latency under load, with the default preload, of
// `pass` (from the interpreters without asyncio) and of a program that
// awaits (from those with it). Run with -benchtime 1x.
func BenchmarkThroughput(b *testing.B) {
	h := start(b, "")
	h.run("pass", nil)
	const awaits = "import asyncio\nawait asyncio.sleep(0)"
	h.run(awaits, nil)
	for range b.N {
		waitPoolFull(b, h)
		lat, wall := load(b, h, 400, 8, "pass")
		b.ReportMetric(float64(len(lat))/wall.Seconds(), "exec/s")
		b.ReportMetric(p50(lat), "p50-ms")
		b.ReportMetric(percentile(lat, 99), "p99-ms")
		waitPoolFull(b, h)
		lat, wall = load(b, h, 400, 8, awaits)
		b.ReportMetric(float64(len(lat))/wall.Seconds(), "await-exec/s")
		b.ReportMetric(p50(lat), "await-p50-ms")
		b.ReportMetric(percentile(lat, 99), "await-p99-ms")
	}
}

// BenchmarkHostMemory: host RSS before and after 10 000 executions (with
// output), after a warm-up. Run with -benchtime 1x.
func BenchmarkHostMemory(b *testing.B) {
	h := start(b, "")
	code := "print('x' * 1000)\ncyrnel.output({'k': list(range(50))})"
	load(b, h, 200, 8, code)
	before := serverRSS(b, h)
	for range b.N {
		load(b, h, 10000, 8, code)
	}
	after := serverRSS(b, h)
	b.ReportMetric(float64(before)/1024, "rss-before-MiB")
	b.ReportMetric(float64(after)/1024, "rss-after-MiB")
	b.ReportMetric(float64(after)/float64(before), "rss-ratio")
}

// BenchmarkPreload: the first import of a heavy module inside an execution,
// with and without the module in the python config's preload. The machine
// has no pandas or numpy (and no PyPI), so http.server stands in.
func BenchmarkPreload(b *testing.B) {
	h := start(b, "")
	code := "import time\nt = time.perf_counter()\nimport http.server\ncyrnel.output({'ms': (time.perf_counter() - t) * 1000})"
	measure := func() []time.Duration {
		var out []time.Duration
		for range b.N {
			p := h.run(code, nil)
			ms, _ := p.Output["ms"].(float64)
			out = append(out, time.Duration(ms*float64(time.Millisecond)))
		}
		return out
	}
	cold := measure()
	if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"preload": []string{"http.server"}}, nil); st != 200 {
		b.Fatalf("set preload: %d", st)
	}
	warm := measure()
	b.ReportMetric(p50(cold), "import-p50-ms")
	b.ReportMetric(p50(warm), "preloaded-import-p50-ms")
}

// BenchmarkToolCall: a tool call from Python through the host to the openapi
// adapter and a loopback API that answers at once, timed inside the program
// (median of 200 sequential calls per iteration), next to the same request
// made directly, in the same run:
//   - from Python with a keep-alive http.client connection, in an
//     unsandboxed interpreter (the sandbox has no network): what the program
//     would do without the tool, and like the host's request it crosses
//     from another process to the API's; the baseline of issue 15's target;
//   - from Go with a keep-alive client inside the API's own process, back to
//     back and with 50 µs of idle before each request (as the host's calls
//     come, with the program's work between them): context only, since it
//     crosses no process and, back to back, never wakes a parked thread.
func BenchmarkToolCall(b *testing.B) {
	h := start(b, "")
	up := importPets(b, h)
	code := strings.Join([]string{
		"import time, statistics",
		"f = cyrnel.services.pets.getPetById",
		"f(petId=1)",
		"lat = []",
		"for _ in range(200):",
		"    t = time.perf_counter(); f(petId=1); lat.append(time.perf_counter() - t)",
		"from cyrnel import _rpc",
		"rt = []",
		"for _ in range(200):",
		"    t = time.perf_counter()",
		"    try: _rpc.conn.call('noSuchMethod', {})",
		"    except _rpc.RPCError: pass",
		"    rt.append(time.perf_counter() - t)",
		"cyrnel.output({'p50us': statistics.median(lat) * 1e6, 'rpcus': statistics.median(rt) * 1e6})",
	}, "\n")
	python, err := exec.LookPath("python3")
	if err != nil {
		b.Fatal(err)
	}
	// The same GET a tool call makes (getPetById sends Accept), read and
	// decoded as JSON, on one kept-alive connection.
	directPython := strings.Join([]string{
		"import http.client, json, statistics, sys, time, urllib.parse",
		"u = urllib.parse.urlsplit(sys.argv[1])",
		"c = http.client.HTTPConnection(u.hostname, u.port)",
		"def get():",
		"    c.request('GET', '/pet/1', headers={'Accept': 'application/json'})",
		"    return json.loads(c.getresponse().read())",
		"get()",
		"lat = []",
		"for _ in range(200):",
		"    t = time.perf_counter(); get(); lat.append(time.perf_counter() - t)",
		"print(statistics.median(lat) * 1e6)",
	}, "\n")
	var inPython, fromPython, direct, idle, rpc []time.Duration
	client := &http.Client{}
	get := func() time.Duration {
		t0 := time.Now()
		resp, err := client.Get(up.URL + "/pet/1")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return time.Since(t0)
	}
	micros := func(us float64) time.Duration { return time.Duration(us * float64(time.Microsecond)) }
	for range b.N {
		p := h.run(code, nil)
		us, _ := p.Output["p50us"].(float64)
		inPython = append(inPython, micros(us))
		us, _ = p.Output["rpcus"].(float64)
		rpc = append(rpc, micros(us))
		out, err := exec.Command(python, "-I", "-c", directPython, up.URL).Output()
		if err != nil {
			b.Fatal(err)
		}
		if us, err = strconv.ParseFloat(strings.TrimSpace(string(out)), 64); err != nil {
			b.Fatal(err)
		}
		fromPython = append(fromPython, micros(us))
		var d, s []time.Duration
		for range 200 {
			d = append(d, get())
		}
		for range 200 {
			time.Sleep(50 * time.Microsecond)
			s = append(s, get())
		}
		direct = append(direct, time.Duration(p50(d)*float64(time.Millisecond)))
		idle = append(idle, time.Duration(p50(s)*float64(time.Millisecond)))
	}
	b.ReportMetric(p50(inPython)*1000, "python-call-p50-us")
	b.ReportMetric(p50(fromPython)*1000, "python-direct-p50-us")
	b.ReportMetric((p50(inPython)-p50(fromPython))*1000, "added-us")
	b.ReportMetric(p50(direct)*1000, "go-in-process-p50-us")
	b.ReportMetric(p50(idle)*1000, "go-in-process-idle-p50-us")
	// A bare round trip to the host (an unknown method): the crossing alone.
	b.ReportMetric(p50(rpc)*1000, "rpc-roundtrip-p50-us")
}

// BenchmarkTypeScriptExecution: a trivial TypeScript program through the
// HTTP API (POST /processes with waitMs), next to the same for Python, in
// one run. TypeScript workers serve many executions, so no refill is waited;
// being cheap, they are sampled five times as often, after the switch has
// settled (Python drained, the TypeScript pool full) and a warm-up.
func BenchmarkTypeScriptExecution(b *testing.B) {
	h := start(b, "")
	if st, _ := h.do("PUT", "/environment", map[string]any{"module": "typescript"}, nil); st != 200 {
		b.Fatalf("switch: %d", st)
	}
	waitSettled(b, h)
	for range 100 {
		h.run("1", nil)
	}
	var ts []time.Duration
	for range 5 * b.N {
		t0 := time.Now()
		if p := h.run("const x: number = 1;", nil); p.exit() != "success" {
			b.Fatalf("%+v", p)
		}
		ts = append(ts, time.Since(t0))
	}
	if st, _ := h.do("PUT", "/environment", map[string]any{"module": "python"}, nil); st != 200 {
		b.Fatalf("switch: %d", st)
	}
	var py []time.Duration
	for range b.N {
		waitPoolFull(b, h)
		t0 := time.Now()
		if p := h.run("pass", nil); p.exit() != "success" {
			b.Fatalf("%+v", p)
		}
		py = append(py, time.Since(t0))
	}
	b.ReportMetric(p50(ts), "ts-p50-ms")
	b.ReportMetric(percentile(ts, 99), "ts-p99-ms")
	b.ReportMetric(p50(py), "python-p50-ms")
	b.ReportMetric(p50(py)/p50(ts), "python/ts")
}

// BenchmarkScaleOut: 1, 2 and 3 hosts on loopback against one PostgreSQL
// (each size on a fresh schema), 8 clients submitting trivial programs
// round-robin across the hosts; executions per second, the ratio to one
// host in the same run, and database time per execution: the growth of
// pg_stat_database.active_time of a database made for this benchmark (so
// no other session counts), from after the warm-up until the hosts stopped
// (a backend reports its statistics at the latest when it exits). Run with
// -benchtime 1x.
func BenchmarkScaleOut(b *testing.B) {
	url := pgtest.URL(b)
	admin, err := sql.Open("pgx", url)
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close()
	name := fmt.Sprintf("cyrnel_bench_%d", time.Now().UnixNano())
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		b.Fatalf("a database of its own (the test user needs CREATEDB): %v", err)
	}
	defer admin.Exec("DROP DATABASE " + name + " WITH (FORCE)")
	u, err := neturl.Parse(url)
	if err != nil {
		b.Fatal(err)
	}
	u.Path = "/" + name
	benchURL := u.String()
	activeMs := func() float64 {
		var ms float64
		if err := admin.QueryRow("SELECT active_time FROM pg_stat_database WHERE datname = $1", name).Scan(&ms); err != nil {
			b.Fatal(err)
		}
		return ms
	}
	const n = 300
	var one float64
	for range b.N {
		for size := 1; size <= 3; size++ {
			hs := startClusterOn(b, benchURL, size)
			for _, h := range hs {
				load(b, h, 10, 2, "pass") // warm each host's pool
			}
			before := activeMs()
			lat, wall := loadAcross(b, hs, n, 8, "pass")
			for _, h := range hs {
				h.stop()
			}
			dbMs := activeMs() - before
			rate := float64(len(lat)) / wall.Seconds()
			if size == 1 {
				one = rate
			}
			b.ReportMetric(rate, fmt.Sprintf("%dhost-exec/s", size))
			b.ReportMetric(p50(lat), fmt.Sprintf("%dhost-p50-ms", size))
			b.ReportMetric(dbMs/float64(len(lat)), fmt.Sprintf("%dhost-db-ms/exec", size))
			b.ReportMetric(rate/one, fmt.Sprintf("%dhost-ratio", size))
		}
	}
}

// loadAcross is load with the executions spread round-robin over hosts.
func loadAcross(b *testing.B, hs []*host, n, c int, code string) ([]time.Duration, time.Duration) {
	var mu sync.Mutex
	lat := make([]time.Duration, 0, n)
	jobs := make(chan int, n)
	for i := range n {
		jobs <- i
	}
	close(jobs)
	var wg sync.WaitGroup
	began := time.Now()
	for range c {
		wg.Go(func() {
			for i := range jobs {
				t0 := time.Now()
				p := hs[i%len(hs)].run(code, nil)
				d := time.Since(t0)
				if p.exit() != "success" {
					b.Errorf("%+v", p)
					return
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return lat, time.Since(began)
}
