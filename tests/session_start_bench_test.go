package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// jupyterBaseline runs a Jupyter script with /usr/bin/python3 (Debian's
// python3-ipykernel and python3-jupyter-client) and decodes what it prints
// into out. Without Jupyter the benchmark fails, unless
// CYRNEL_TEST_NO_JUPYTER says why there is none: then it reports false.
func jupyterBaseline(b *testing.B, out any, script string, args ...string) bool {
	b.Helper()
	got, err := exec.Command("/usr/bin/python3", append([]string{"-c", script}, args...)...).Output()
	if err != nil {
		if why := os.Getenv("CYRNEL_TEST_NO_JUPYTER"); why != "" {
			b.Logf("no Jupyter kernel to compare with (CYRNEL_TEST_NO_JUPYTER: %s)", why)
			return false
		}
		b.Fatalf("Jupyter kernel (apt-get install python3-ipykernel python3-jupyter-client, or set CYRNEL_TEST_NO_JUPYTER=<why>): %v", err)
	}
	if err := json.Unmarshal(got, out); err != nil {
		b.Fatalf("Jupyter baseline: %v (%s)", err, got)
	}
	return true
}

// millis turns milliseconds into durations.
func millis(ms []float64) []time.Duration {
	out := make([]time.Duration, len(ms))
	for i, m := range ms {
		out[i] = time.Duration(m * float64(time.Millisecond))
	}
	return out
}

// jupyterKernels starts n kernels one after the other, timing each start
// until the kernel answers (start_new_kernel waits for its kernel_info
// reply), runs `x = 1` in each, then reads the proportional set size of
// every process below this one (the kernels) while all n are idle.
const jupyterKernels = `
import json, os, sys, time
from jupyter_client.manager import start_new_kernel
n = int(sys.argv[1])
kernels, starts = [], []
def below(pid):
    out = []
    for task in os.listdir(f"/proc/{pid}/task"):
        for c in open(f"/proc/{pid}/task/{task}/children").read().split():
            out += [int(c)] + below(int(c))
    return out
def pss(pid):
    for line in open(f"/proc/{pid}/smaps_rollup"):
        if line.startswith("Pss:"):
            return int(line.split()[1])
    return 0
try:
    for _ in range(n):
        t0 = time.perf_counter()
        km, kc = start_new_kernel(kernel_name="python3")
        starts.append((time.perf_counter() - t0) * 1000)
        kernels.append((km, kc))
        assert kc.execute_interactive("x = 1", timeout=30)["content"]["status"] == "ok"
    print(json.dumps({"startMs": starts, "pssKiB": sum(pss(p) for p in below(os.getpid()))}))
finally:
    for km, kc in kernels:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
`

// below lists every process under pid, children before theirs.
func below(pid int) []int {
	var out []int
	for _, c := range childPids(pid) {
		out = append(append(out, c), below(c)...)
	}
	return out
}

// treePSS is the proportional set size of every process under pid (not
// pid itself), in bytes: each shared page counts once across the
// processes that map it, so the sum is what they cost the machine together.
func treePSS(b *testing.B, pid int) int64 {
	b.Helper()
	var total int64
	for _, p := range below(pid) {
		f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", p))
		if err != nil {
			continue // ended meanwhile
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
				kib, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(v, "kB")), 10, 64)
				total += kib << 10
			}
		}
		f.Close()
	}
	return total
}

// BenchmarkSessionCreate: creating a session through HTTP (POST /sessions,
// answered once its interpreter is ready), then deleting it, b.N times;
// beside the start of a Jupyter kernel measured in the same run. Targets
// (issue 28): p50 at most 30 ms, goal 10 ms.
func BenchmarkSessionCreate(b *testing.B) {
	h := start(b, "")
	h.run("pass", nil)
	waitSettled(b, h)
	forked, why := templateStatus(h)
	b.Logf("template: %v %s", forked, why)
	h.do("DELETE", "/sessions/"+h.newSession(map[string]any{}).ID, nil, nil) // connection set-up
	var creates []time.Duration
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		s := h.newSession(map[string]any{})
		creates = append(creates, time.Since(t0))
		b.StopTimer()
		if st, _ := h.do("DELETE", "/sessions/"+s.ID, nil, nil); st != 204 && st != 200 {
			b.Fatalf("delete session: %d", st)
		}
		waitPoolFull(b, h)
		b.StartTimer()
	}
	b.StopTimer()
	b.ReportMetric(p50(creates), "create-p50-ms")
	b.ReportMetric(percentile(creates, 99), "create-p99-ms")
	b.Logf("create a session p50 %.2f ms (p99 %.2f)", p50(creates), percentile(creates, 99))

	var jup struct {
		StartMs []float64 `json:"startMs"`
	}
	if !jupyterBaseline(b, &jup, jupyterKernels, "5") {
		return
	}
	starts := millis(jup.StartMs)
	b.ReportMetric(p50(starts), "jupyter-start-p50-ms")
	b.ReportMetric(p50(creates)/p50(starts), "create-vs-jupyter-x")
	b.Logf("Jupyter kernel start p50 %.2f ms; a session costs %.3fx that", p50(starts), p50(creates)/p50(starts))
}

// idleSessions is how many sessions BenchmarkSessionMemory holds at once.
const idleSessions = 50

// BenchmarkSessionMemory: the memory of idle sessions, 50 at once, each
// having run `x = 1`: the proportional set size they add to the server's
// process tree (interpreters, sandbox processes, the template's pages they
// share), per session; beside idle Jupyter kernels in the same run (10,
// each having run `x = 1`). Targets (issue 28): at most 10 MB, goal 6 MB.
func BenchmarkSessionMemory(b *testing.B) {
	h := start(b, "", fmt.Sprintf("CYRNEL_MAX_SESSIONS=%d", idleSessions))
	h.run("pass", nil)
	waitSettled(b, h)
	forked, why := templateStatus(h)
	b.Logf("template: %v %s", forked, why)
	server := h.cmd.Process.Pid
	var perSession []float64
	for range b.N {
		before := treePSS(b, server)
		ids := make([]string, idleSessions)
		for i := range ids {
			ids[i] = h.newSession(map[string]any{}).ID
			if p := h.run("x = 1", session(ids[i])); p.exit() != "success" {
				b.Fatalf("x = 1: %s %s", p.exit(), p.Stderr)
			}
		}
		waitPoolFull(b, h)
		after := treePSS(b, server)
		perSession = append(perSession, float64(after-before)/idleSessions/(1<<20))
		for _, id := range ids {
			h.do("DELETE", "/sessions/"+id, nil, nil)
		}
	}
	b.ReportMetric(median(perSession), "pss-per-session-MiB")
	b.Logf("%d idle sessions: %.2f MiB of PSS each", idleSessions, median(perSession))

	var jup struct {
		PssKiB int64 `json:"pssKiB"`
	}
	const kernels = 10
	if !jupyterBaseline(b, &jup, jupyterKernels, strconv.Itoa(kernels)) {
		return
	}
	kernel := float64(jup.PssKiB) / kernels / 1024
	b.ReportMetric(kernel, "jupyter-pss-per-kernel-MiB")
	b.ReportMetric(median(perSession)/kernel, "session-vs-jupyter-x")
	b.Logf("%d idle Jupyter kernels: %.2f MiB of PSS each; a session takes %.3fx that", kernels, kernel, median(perSession)/kernel)
}

// median of plain numbers (the lower one of an even count).
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}
