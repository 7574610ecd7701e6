package process

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cyrnel/cyrnel/host/lifecycle"
	"github.com/cyrnel/cyrnel/host/store"
)

// writer owns every write to the process rows: one goroutine takes the
// writes callers queue and commits those queued together in one
// transaction (group commit), so concurrent
// executions share commits; a pid is handed out only once its row is
// committed. Callers wait for their own write's outcome.
type writer struct {
	st     Store
	queue  chan *write
	obs    Observer
	tracer trace.Tracer // nil: not traced

	mu      sync.RWMutex // held to queue; exclusively to close the queue
	stopped bool
	loop    lifecycle.Loop // commits until the queue is closed
	halt    chan struct{}  // closed by stop: durable writes stop retrying
}

// write is one unit of a batch: apply runs inside the batch's transaction
// and may run again, alone, if the batch fails (so it only sets results).
// One that makes several statements says so: alone it still runs in a
// transaction of its own, so it lands whole or not at all.
type write struct {
	apply   func(context.Context, *store.Tx) error
	several bool
	err     chan error
}

// maxBatch bounds how many writes share a transaction.
const maxBatch = 64

// writeTimeout bounds one transaction, the wait for the database included.
const writeTimeout = 30 * time.Second

// errWriterStopped answers writes after shutdown: a conflict, as every
// request the stopping host refuses.
var errWriterStopped error = &conflictError{"the host is shutting down"}

func newWriter(st Store, ins Instruments) *writer {
	return &writer{st: st, obs: ins.Observer, tracer: ins.Tracer, queue: make(chan *write, maxBatch), halt: make(chan struct{})}
}

// start starts committing; stop ends it.
func (w *writer) start(ctx context.Context) error {
	return w.loop.Start(ctx, func(context.Context) { w.commitQueued() })
}

// do queues apply, a single statement, and returns its outcome once its
// transaction ended.
func (w *writer) do(apply func(context.Context, *store.Tx) error) error {
	return w.queueWrite(&write{apply: apply})
}

func (w *writer) queueWrite(wr *write) error {
	wr.err = make(chan error, 1)
	w.mu.RLock()
	if w.stopped {
		w.mu.RUnlock()
		return errWriterStopped
	}
	w.queue <- wr
	w.mu.RUnlock()
	return <-wr.err
}

// durableRetry bounds the pause between tries of a durable write.
const (
	durableFirstPause = 50 * time.Millisecond
	durableMaxPause   = 2 * time.Second
)

// doDurable is do for a write that must land (an execution's result),
// perhaps of several statements: while the database cannot answer
// (store.Unavailable) it is tried again, pausing longer each time up to
// durableMaxPause, until it lands, fails for another reason, or stop ends
// the wait (the host is going; its rows are then the next start's or the
// lease's to finish).
func (w *writer) doDurable(apply func(context.Context, *store.Tx) error, several bool) error {
	pause := durableFirstPause
	for {
		err := w.queueWrite(&write{apply: apply, several: several})
		if err == nil || !store.Unavailable(err) {
			return err
		}
		select {
		case <-w.halt:
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, durableMaxPause)
	}
}

// traced is do in a span of ctx's trace, when tracing is on and ctx is in
// a recorded trace (an execution's row writes).
func (w *writer) traced(ctx context.Context, name string, apply func(context.Context, *store.Tx) error) error {
	return w.span(ctx, name, w.do, apply)
}

// tracedDurable is doDurable as traced is do.
func (w *writer) tracedDurable(ctx context.Context, name string, apply func(context.Context, *store.Tx) error, several bool) error {
	return w.span(ctx, name, func(apply func(context.Context, *store.Tx) error) error { return w.doDurable(apply, several) }, apply)
}

func (w *writer) span(ctx context.Context, name string, do func(func(context.Context, *store.Tx) error) error, apply func(context.Context, *store.Tx) error) error {
	if w.tracer == nil || !trace.SpanFromContext(ctx).IsRecording() {
		return do(apply)
	}
	_, span := w.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("db.system.name", dbSystem(w.st))))
	err := do(apply)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "write failed")
	}
	span.End()
	return err
}

// dbSystem names the database as OpenTelemetry's conventions do.
func dbSystem(st Store) string {
	if st.Local() {
		return "sqlite"
	}
	return "postgresql"
}

// stop ends the writer once what was queued is written. A second stop is
// harmless.
func (w *writer) stop() {
	w.mu.Lock()
	if !w.stopped {
		w.stopped = true
		close(w.halt)
		close(w.queue)
	}
	w.mu.Unlock()
	w.loop.Stop(context.Background()) //nolint:errcheck // no deadline: it waits for the queue's last batch
}

// commitQueued commits the queued writes in batches until the queue is
// closed.
func (w *writer) commitQueued() {
	batch := make([]*write, 0, maxBatch)
	for first := range w.queue {
		batch = append(batch[:0], first)
	more:
		for len(batch) < maxBatch {
			select {
			case wr, ok := <-w.queue:
				if !ok {
					break more
				}
				batch = append(batch, wr)
			default:
				break more
			}
		}
		start := time.Now()
		w.commit(batch)
		w.obs.RowsWritten(len(batch), time.Since(start))
	}
}

// commit writes a batch of several writes in one transaction, a lone
// single statement by itself (no BEGIN and COMMIT around it). If a batch
// fails, each write is tried alone, so one write's failure is its own and
// not its neighbours'.
func (w *writer) commit(batch []*write) {
	ctx, cancel := context.WithTimeout(context.Background(), writeTimeout)
	defer cancel()
	var err error
	if len(batch) > 1 {
		err = w.st.WriteProcesses(ctx, func(ctx context.Context, tx *store.Tx) error {
			for _, wr := range batch {
				if err := wr.apply(ctx, tx); err != nil {
					return err
				}
			}
			return nil
		})
		if err == nil {
			for _, wr := range batch {
				wr.err <- nil
			}
			return
		}
	}
	for _, wr := range batch {
		if wr.several {
			wr.err <- w.st.WriteProcesses(ctx, wr.apply)
			continue
		}
		wr.err <- w.st.WriteProcess(ctx, wr.apply)
	}
}
