package logs

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestHandlerAddsTraceAndPID(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(NewHandler(slog.NewJSONHandler(&buf, nil))).With("component", "processes")
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid}))
	ctx = WithPID(ctx, 42)

	log.InfoContext(ctx, "traced")
	log.InfoContext(ctx, "named", "pid", int64(42)) // the call's own pid is not repeated
	log.Info("plain")                               // no context: nothing added
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines: %s", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["trace_id"] != tid.String() || rec["span_id"] != sid.String() || rec["pid"] != float64(42) || rec["component"] != "processes" {
		t.Errorf("traced record: %v", rec)
	}
	if n := strings.Count(lines[1], `"pid"`); n != 1 {
		t.Errorf("pid %d times in %s", n, lines[1])
	}
	if strings.Contains(lines[2], "trace_id") || strings.Contains(lines[2], "pid") {
		t.Errorf("plain record got identifiers: %s", lines[2])
	}
}
