// Package logs is the host's slog handler: it adds, to each record logged
// with a context, the trace and span the context carries (trace_id,
// span_id) and the process it concerns (pid), so a log line joins the
// request, its execution and its tool calls.
package logs

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

type pidKey struct{}

// WithPID returns ctx naming the process its work is for.
func WithPID(ctx context.Context, pid int64) context.Context {
	return context.WithValue(ctx, pidKey{}, pid)
}

// PID returns the process ctx names (0: none).
func PID(ctx context.Context) int64 {
	pid, _ := ctx.Value(pidKey{}).(int64)
	return pid
}

// Handler wraps a handler with the context's identifiers.
type Handler struct{ next slog.Handler }

// NewHandler returns next with the context's identifiers added.
func NewHandler(next slog.Handler) *Handler { return &Handler{next: next} }

// Enabled is next's.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

// Handle adds trace_id, span_id and pid where ctx has them.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	if pid := PID(ctx); pid > 0 && !hasPID(r) {
		r.AddAttrs(slog.Int64("pid", pid))
	}
	return h.next.Handle(ctx, r)
}

// hasPID: the call named the pid itself.
func hasPID(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		found = a.Key == "pid"
		return !found
	})
	return found
}

// WithAttrs is next's, wrapped.
func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(attrs)}
}

// WithGroup is next's, wrapped.
func (h *Handler) WithGroup(name string) slog.Handler { return &Handler{next: h.next.WithGroup(name)} }
