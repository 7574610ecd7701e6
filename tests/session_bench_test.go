package tests

import (
	"fmt"
	"testing"
	"time"
)

// jupyterRoundTrips measures n (argv 1) execute round trips of `pass`, or
// of the code in argv 3 after the set-up in argv 2, in a warm Jupyter kernel
// (Debian's python3-ipykernel and python3-jupyter-client), in milliseconds,
// measured by jupyter_client itself.
const jupyterRoundTrips = `
import json, sys, time
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="python3")
quiet = lambda msg: None  # a cell's result is a message, not our stdout
try:
    code = sys.argv[3] if len(sys.argv) > 3 else "pass"
    reply = kc.execute_interactive(sys.argv[2] if len(sys.argv) > 2 else "pass", timeout=120, output_hook=quiet)
    assert reply["content"]["status"] == "ok", reply
    kc.execute_interactive(code, timeout=30, output_hook=quiet)
    out = []
    for _ in range(int(sys.argv[1])):
        t0 = time.perf_counter()
        reply = kc.execute_interactive(code, timeout=30, output_hook=quiet)
        out.append((time.perf_counter() - t0) * 1000)
        assert reply["content"]["status"] == "ok", reply
    print(json.dumps(out))
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
`

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

	var ms []float64
	if !jupyterBaseline(b, &ms, jupyterRoundTrips, fmt.Sprint(max(b.N, 20))) {
		return
	}
	jupyter := millis(ms)
	b.ReportMetric(p50(jupyter), "jupyter-p50-ms")
	b.ReportMetric(p50(jupyter)/p50(inSession), "session-vs-jupyter-x")
	b.Logf("Jupyter execute round trip p50 %.2f ms; the session is %.1fx faster", p50(jupyter), p50(jupyter)/p50(inSession))
}
