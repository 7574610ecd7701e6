package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// nodeVM is Node running programs with vm.runInNewContext behind its own
// HTTP server (testdata/nodevm.js): the baseline of the TypeScript
// environment.
type nodeVM struct {
	url string
	cmd *exec.Cmd
}

// startNodeVM starts testdata/nodevm.js and waits until it listens.
func startNodeVM(b *testing.B) *nodeVM {
	b.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		b.Fatalf("node is required for the baseline (make bench installs Debian's nodejs): %v", err)
	}
	cmd := exec.Command(node, "testdata/nodevm.js")
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		b.Fatalf("nodevm.js printed no port: %v", sc.Err())
	}
	return &nodeVM{url: "http://127.0.0.1:" + sc.Text(), cmd: cmd}
}

// run posts code the way host.run does (a JSON body, the answer decoded)
// and fails unless the program succeeded.
func (n *nodeVM) run(b *testing.B, code string) {
	body, _ := json.Marshal(map[string]any{"code": code})
	resp, err := http.Post(n.url, "application/json", bytes.NewReader(body))
	if err != nil {
		b.Error(err) // not Fatal: clients call this from their goroutines
		return
	}
	defer resp.Body.Close()
	var p struct {
		ExitState string `json:"exitState"`
		Error     string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil || p.ExitState != "success" {
		b.Errorf("node: %v %+v", err, p)
	}
}

// clients runs n calls of one from c concurrent clients and returns the
// calls per second and each call's latency.
func clients(n, c int, one func()) (float64, []time.Duration) {
	jobs := make(chan struct{}, n)
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	var mu sync.Mutex
	lat := make([]time.Duration, 0, n)
	var wg sync.WaitGroup
	began := time.Now()
	for range c {
		wg.Go(func() {
			for range jobs {
				t0 := time.Now()
				one()
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(began).Seconds(), lat
}

// descendantsCPU is the CPU every live descendant of pid has used (the
// TypeScript workers and their sandbox inits under a server).
func descendantsCPU(pid int) time.Duration {
	var d time.Duration
	for _, c := range childPids(pid) {
		if t, err := readProcTimes(c); err == nil {
			d += t.self
		}
		d += descendantsCPU(c)
	}
	return d
}

// cpuOf reads the CPU of a process and of its descendants.
func cpuOf(b *testing.B, pid int) (self, below time.Duration) {
	t, err := readProcTimes(pid)
	if err != nil {
		b.Fatal(err)
	}
	return t.self, descendantsCPU(pid)
}

// medianOf returns the median of xs.
func medianOf(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// side is one of the two compared: how to run a program, and the process
// whose CPU it costs.
type side struct {
	run func()
	pid int
}

// blockStats is what one block measured: its rate, its latencies, and the
// CPU and context switches of the side's process and of its descendants.
type blockStats struct {
	rate            float64
	lat             []time.Duration
	self, below     time.Duration
	selfCS, belowCS int64
}

// block runs n executions from c clients.
func (sd side) block(b *testing.B, n, c int) blockStats {
	self0, below0 := cpuOf(b, sd.pid)
	cs0, bcs0 := switchesOf(sd.pid)
	rate, lat := clients(n, c, sd.run)
	self1, below1 := cpuOf(b, sd.pid)
	cs1, bcs1 := switchesOf(sd.pid)
	return blockStats{rate: rate, lat: lat, self: self1 - self0, below: below1 - below0, selfCS: cs1 - cs0, belowCS: bcs1 - bcs0}
}

// switchesOf counts the context switches (voluntary and not) of pid's
// threads and of its descendants': each is a thread put to sleep or
// preempted, the hand-offs the CPU figures do not show. A thread that ended
// takes its count with it; Go's threads seldom end.
func switchesOf(pid int) (self, below int64) {
	self = taskSwitches(pid)
	for _, c := range childPids(pid) {
		s, b := switchesOf(c)
		below += s + b
	}
	return self, below
}

// taskSwitches sums the context switches of every thread of pid.
func taskSwitches(pid int) int64 {
	files, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var n int64
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // the thread ended
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.HasSuffix(k, "ctxt_switches") {
				x, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				n += x
			}
		}
	}
	return n
}

// BenchmarkTypeScriptVsNode: TypeScript `1+1` through the HTTP API (every
// layer on: auth, the process rows in SQLite, a sandboxed worker) against
// Node running it with vm.runInNewContext behind its own HTTP server, with
// 1 and 8 clients. The two alternate in blocks of 300 executions (the first
// of each pair alternating too), 9 pairs per client count, so both see the
// same machine; it reports the medians of the blocks' rates, the median of
// each pair's ratio, and the CPU and context switches per execution of the
// cyrnel server, of its workers (with their sandbox inits), and of Node. Run
// with -benchtime 1x.
func BenchmarkTypeScriptVsNode(b *testing.B) {
	const code, block, pairs = "1+1", 300, 9
	h := start(b, "")
	if st, _ := h.do("PUT", "/environment", map[string]any{"module": "typescript"}, nil); st != 200 {
		b.Fatalf("switch: %d", st)
	}
	waitSettled(b, h)
	node := startNodeVM(b)
	ts := side{pid: h.cmd.Process.Pid, run: func() {
		if p := h.run(code, nil); p.exit() != "success" {
			b.Errorf("%+v", p)
		}
	}}
	nd := side{pid: node.cmd.Process.Pid, run: func() { node.run(b, code) }}
	us := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }
	per := func(n int64) float64 { return float64(n) / float64(block*pairs) }
	for range b.N {
		for _, c := range []int{1, 8} {
			// Warm: the pool grows to the concurrency, and V8 compiles the
			// server's hot paths (Node's rate still climbs over its first
			// ~1500 requests).
			clients(2000, c, ts.run)
			clients(2000, c, nd.run)
			var tsRate, ndRate, ratio []float64
			var tsLat, ndLat []time.Duration
			var server, workers, nodeCPU time.Duration
			var serverCS, workersCS, nodeCS int64
			for i := range pairs {
				var t, n blockStats
				if i%2 == 0 {
					t, n = ts.block(b, block, c), nd.block(b, block, c)
				} else {
					n = nd.block(b, block, c)
					t = ts.block(b, block, c)
				}
				tsRate, ndRate, ratio = append(tsRate, t.rate), append(ndRate, n.rate), append(ratio, t.rate/n.rate)
				tsLat, ndLat = append(tsLat, t.lat...), append(ndLat, n.lat...)
				server, workers, nodeCPU = server+t.self, workers+t.below, nodeCPU+n.self
				serverCS, workersCS, nodeCS = serverCS+t.selfCS, workersCS+t.belowCS, nodeCS+n.selfCS
			}
			b.ReportMetric(medianOf(tsRate), fmt.Sprintf("ts-%dclient-exec/s", c))
			b.ReportMetric(medianOf(ndRate), fmt.Sprintf("node-%dclient-exec/s", c))
			b.ReportMetric(medianOf(ratio), fmt.Sprintf("ts-vs-node-%dclient-x", c))
			b.ReportMetric(p50(tsLat), fmt.Sprintf("ts-%dclient-p50-ms", c))
			b.ReportMetric(p50(ndLat), fmt.Sprintf("node-%dclient-p50-ms", c))
			if c == 1 {
				b.ReportMetric(us(server, block*pairs), "ts-server-cpu-us/exec")
				b.ReportMetric(us(workers, block*pairs), "ts-workers-cpu-us/exec")
				b.ReportMetric(us(nodeCPU, block*pairs), "node-cpu-us/exec")
				b.ReportMetric(per(serverCS), "ts-server-cs/exec")
				b.ReportMetric(per(workersCS), "ts-workers-cs/exec")
				b.ReportMetric(per(nodeCS), "node-cs/exec")
			}
			b.Logf("%d client(s): TypeScript %.0f/s (blocks %.0f), Node vm %.0f/s (blocks %.0f), ratios %.2f; per execution: CPU server %.0f µs, workers %.0f µs, Node %.0f µs; context switches server %.1f, workers %.1f, Node %.1f",
				c, medianOf(tsRate), tsRate, medianOf(ndRate), ndRate, ratio, us(server, block*pairs), us(workers, block*pairs), us(nodeCPU, block*pairs),
				per(serverCS), per(workersCS), per(nodeCS))
		}
	}
}
