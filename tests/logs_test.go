package tests

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"os/exec"
	"strings"
	"testing"
)

// TestJSONLogsCarryTheTrace: serve --log-format json writes nothing but
// JSON lines, and a record about a traced execution carries the caller's
// trace_id, the execution's span_id and the pid.
func TestJSONLogsCarryTheTrace(t *testing.T) {
	t.Parallel()
	rcv := newReceiver(t)
	dir := t.TempDir()
	h := startCommand(t, exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--data-dir", dir, "--log-format", "json"), dir,
		"OTEL_EXPORTER_OTLP_ENDPOINT="+rcv.URL, "OTEL_BSP_SCHEDULE_DELAY=50")
	const traceID = "7bf92f3577b34da6a3ce929d0e0e4739"
	// The second key passes the structured output's 1 MiB cap: the host
	// logs a warning about this execution.
	code := "cyrnel.output({'a': 'x' * 700000})\ncyrnel.output({'b': 'x' * 700000})"
	st, p := postTraced(t, h, map[string]any{"code": code, "waitMs": 60000}, "00-"+traceID+"-00f067aa0ba902ba-01")
	if st != http.StatusCreated || p.exit() != "success" {
		t.Fatalf("run: %d %+v", st, p)
	}
	id, _ := hex.DecodeString(traceID)
	execution := onlySpan(t, rcv.waitSpans(t, id, "execution"), "execution")
	h.stop() // every line it wrote has been read

	var rec map[string]any
	for line := range strings.Lines(h.logs.String()) {
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
		if r["msg"] == "structured output over its cap; keys dropped" {
			rec = r
		}
	}
	if rec == nil {
		t.Fatalf("no record of the dropped key:\n%s", h.logs)
	}
	if rec["trace_id"] != traceID || rec["span_id"] != hex.EncodeToString(execution.SpanId) || rec["pid"] != float64(p.PID) {
		t.Errorf("record %v: want trace_id %s, span_id %x (the execution's), pid %d", rec, traceID, execution.SpanId, p.PID)
	}
}
