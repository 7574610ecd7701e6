package process

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/logs"
	"github.com/cyrnel/cyrnel/host/store"
)

// Observer is told what executions and the row writer did (host/metrics).
type Observer interface {
	// ExecutionEnded: an execution ended; queued is how long it waited to
	// run, ran how long it ran (< 0: it never ran).
	ExecutionEnded(environment, exitState, reason string, queued, ran time.Duration)
	// RowsWritten: the writer committed batch writes together.
	RowsWritten(batch int, took time.Duration)
}

type noObserver struct{}

func (noObserver) ExecutionEnded(string, string, string, time.Duration, time.Duration) {}
func (noObserver) RowsWritten(int, time.Duration)                                      {}

// Instruments are what a manager reports to: Observer (nil: nothing) and,
// when Tracer is not nil, a trace of each execution (its queue, its run,
// its row writes) in the trace of the request that started it. They are
// given to New: its goroutines read them from the start.
type Instruments struct {
	Observer Observer
	Tracer   trace.Tracer
}

// With is what a manager works with besides its store and executor (each
// optional), given to New rather than set while it runs.
type With struct {
	Instruments
	// Sessions lets processes run in sessions.
	Sessions Sessions
	// Relay, with several hosts, makes the manager act on executions other
	// hosts run: kills go through it, waits and follows read the row the
	// runner flushes.
	Relay Relay
	// Approvals has follows of executions other hosts run read the
	// approvals their calls wait on.
	Approvals Approvals
	// SpoolDir holds the files a one-shot execution leaves while it runs
	// ("": the system's temporary directory).
	SpoolDir string
	// Now is the clock the rows are stamped and pruned by (nil: time.Now).
	Now func() time.Time
}

// Live counts this host's live executions by state.
func (m *Manager) Live() map[string]int {
	m.mu.Lock()
	runs := make([]*run, 0, len(m.runs))
	for _, r := range m.runs {
		runs = append(runs, r)
	}
	m.mu.Unlock()
	counts := map[string]int{}
	for _, s := range live {
		counts[s] = 0
	}
	for _, r := range runs {
		r.mu.Lock()
		counts[string(r.state)]++
		r.mu.Unlock()
	}
	return counts
}

// startExecution starts the span of an execution, a child of the span ctx
// carries (the request's), or returns nil when tracing is off.
func (m *Manager) startExecution(ctx context.Context, p *store.Process) trace.Span {
	if m.tracer == nil {
		return nil
	}
	_, span := m.tracer.Start(ctx, "execution", trace.WithAttributes(
		attribute.Int64("cyrnel.runs", p.Runs), attribute.String("cyrnel.session", p.Session)))
	return span
}

// traceID is the trace an execution's span belongs to ("" without one).
func traceID(span trace.Span) string {
	if span == nil {
		return ""
	}
	if sc := span.SpanContext(); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}

// logContext is the context of the run's log records and row writes: its
// span and pid.
func (r *run) logContext() context.Context {
	return executionContext(context.Background(), r.pid, r.span)
}

// withSpan is ctx carrying span, or ctx when tracing is off.
func withSpan(ctx context.Context, span trace.Span) context.Context {
	if span == nil {
		return ctx
	}
	return trace.ContextWithSpan(ctx, span)
}

// endFailed ends the span of an execution that could not be queued.
func endFailed(span trace.Span, err error) {
	if span == nil {
		return
	}
	span.RecordError(err)
	span.SetStatus(codes.Error, "not queued")
	span.End()
}

// executionContext is what the environment runs the execution with: it
// carries the execution's span, so the tool calls of its program are its
// children, and its pid for the logs.
func executionContext(ctx context.Context, pid int64, span trace.Span) context.Context {
	return withSpan(logs.WithPID(ctx, pid), span)
}

// traceQueued begins the run's queue span.
func (m *Manager) traceQueued(r *run) {
	if r.span == nil {
		return
	}
	r.span.SetAttributes(attribute.Int64("cyrnel.pid", r.pid))
	_, r.phase = m.tracer.Start(trace.ContextWithSpan(context.Background(), r.span), "execution.queue")
}

// traceRunning ends the queue span and begins the run span (under r.mu).
func (m *Manager) traceRunning(r *run) {
	if r.span == nil {
		return
	}
	r.phase.End()
	_, r.phase = m.tracer.Start(trace.ContextWithSpan(context.Background(), r.span), "execution.run")
}

// ended reports an ended execution: its metrics, and its spans end with
// the exit state.
func (m *Manager) ended(r *run, p *store.Process) {
	r.mu.Lock()
	queuedAt, startedAt, phase := r.queuedAt, r.startedAt, r.phase
	r.mu.Unlock()
	exit, reason := "", p.Reason
	if p.ExitState != nil {
		exit = *p.ExitState
	}
	if !knownReason(reason) {
		reason = "other"
	}
	queued, ran := time.Duration(0), time.Duration(-1)
	if !startedAt.IsZero() && p.FinishedAt != nil {
		queued, ran = startedAt.Sub(queuedAt), p.FinishedAt.Sub(startedAt)
	}
	m.obs.ExecutionEnded(p.Environment, exit, reason, queued, ran)
	if r.span == nil {
		return
	}
	if phase != nil {
		phase.End()
	}
	r.span.SetAttributes(attribute.String("cyrnel.environment", p.Environment),
		attribute.String("cyrnel.exit_state", exit), attribute.String("cyrnel.reason", reason))
	if exit != string(module.ExitSuccess) {
		r.span.SetStatus(codes.Error, reason)
	}
	r.span.End()
}

func knownReason(reason string) bool {
	for _, r := range module.Reasons {
		if string(r) == reason {
			return true
		}
	}
	return false
}
