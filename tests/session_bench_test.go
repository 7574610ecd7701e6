package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"
)

// BenchmarkSessionExecution: an execution in a ready session through HTTP
// (POST /processes {session, code: "pass", waitMs}), beside a one-shot
// execution and a Jupyter kernel's execute round trip measured in the same
// run. The target is a session p50 of at most 1.5 ms.
func BenchmarkSessionExecution(b *testing.B) {
	h := start(b, "")
	var s sessionView
	if st, _ := h.do("POST", "/sessions", map[string]any{}, &s); st != 201 {
		b.Fatalf("create session: %d", st)
	}
	in := map[string]any{"session": s.ID}
	h.run("pass", in) // the first request pays connection set-up
	var inSession, oneShot []time.Duration
	b.ResetTimer()
	for range b.N {
		// The pool refilling after the previous one-shot would compete
		// with the session for the CPU.
		b.StopTimer()
		waitPoolFull(b, h)
		b.StartTimer()
		t0 := time.Now()
		p := h.run("pass", in)
		inSession = append(inSession, time.Since(t0))
		if p.exit() != "success" {
			b.Fatalf("%+v", p)
		}
		t0 = time.Now()
		if p := h.run("pass", nil); p.exit() != "success" {
			b.Fatalf("%+v", p)
		}
		oneShot = append(oneShot, time.Since(t0))
	}
	b.StopTimer()
	b.ReportMetric(p50(inSession), "session-p50-ms")
	b.ReportMetric(percentile(inSession, 99), "session-p99-ms")
	b.ReportMetric(p50(oneShot), "oneshot-p50-ms")
	b.Logf("session HTTP p50 %.2f ms (p99 %.2f); one-shot warm p50 %.2f ms", p50(inSession), percentile(inSession, 99), p50(oneShot))

	k := startKernel(b, "pass", "pass")
	if k == nil {
		return
	}
	jupyter := k.block(max(b.N, 20))
	b.ReportMetric(p50(jupyter), "jupyter-p50-ms")
	b.ReportMetric(p50(jupyter)/p50(inSession), "session-vs-jupyter-x")
	b.Logf("Jupyter execute round trip p50 %.2f ms; the session is %.1fx faster", p50(jupyter), p50(jupyter)/p50(inSession))
}

// jupyterBlocks keeps one warm kernel (Debian's python3-ipykernel and
// python3-jupyter-client) that runs setup, then answers each line on its
// stdin (a count) with that many execute round trips of code, timed by
// jupyter_client itself, as a JSON list of milliseconds: a baseline that
// can alternate with cyrnel's blocks in the same period.
const jupyterBlocks = `
import json, sys, time
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="python3")
quiet = lambda msg: None
try:
    reply = kc.execute_interactive(sys.argv[1], timeout=120, output_hook=quiet)
    assert reply["content"]["status"] == "ok", reply
    kc.execute_interactive(sys.argv[2], timeout=30, output_hook=quiet)
    print("[]", flush=True)
    for line in sys.stdin:
        out = []
        for _ in range(int(line)):
            t0 = time.perf_counter()
            reply = kc.execute_interactive(sys.argv[2], timeout=30, output_hook=quiet)
            out.append((time.perf_counter() - t0) * 1000)
            assert reply["content"]["status"] == "ok", reply
        print(json.dumps(out), flush=True)
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
`

// kernel is a warm Jupyter kernel driven by jupyterBlocks.
type kernel struct {
	b   *testing.B
	in  io.WriteCloser
	out *bufio.Scanner
}

// startKernel starts a kernel that ran setup and code once; nil when there
// is no Jupyter and CYRNEL_TEST_NO_JUPYTER says why.
func startKernel(b *testing.B, setup, code string) *kernel {
	b.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", jupyterBlocks, setup, code)
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		in.Close() // the driver's loop ends, and it shuts the kernel down
		cmd.Wait()
	})
	k := &kernel{b: b, in: in, out: bufio.NewScanner(stdout)}
	if !k.out.Scan() { // the driver's first line: the kernel is warm
		in.Close()
		cmd.Wait() // stderr is complete
		if why := os.Getenv("CYRNEL_TEST_NO_JUPYTER"); why != "" {
			b.Logf("no Jupyter kernel to compare with (CYRNEL_TEST_NO_JUPYTER: %s)", why)
			return nil
		}
		b.Fatalf("Jupyter kernel (apt-get install python3-ipykernel python3-jupyter-client, or set CYRNEL_TEST_NO_JUPYTER=<why>): %s", stderr.String())
	}
	return k
}

// block runs n timed round trips.
func (k *kernel) block(n int) []time.Duration {
	k.b.Helper()
	if _, err := fmt.Fprintln(k.in, n); err != nil {
		k.b.Fatal(err)
	}
	var ms []float64
	if !k.out.Scan() || json.Unmarshal(k.out.Bytes(), &ms) != nil || len(ms) != n {
		k.b.Fatalf("Jupyter block: %q", k.out.Text())
	}
	return millis(ms)
}
