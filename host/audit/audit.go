// Package audit records every tool call: a writer goroutine takes records
// from a bounded queue and stores them in batches, off the call's path, and
// prunes the table to its retention bounds.
package audit

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cyrnel/cyrnel/host/lifecycle"
	"github.com/cyrnel/cyrnel/host/retention"
	"github.com/cyrnel/cyrnel/host/store"
)

// Outcome is how a tool call ended.
type Outcome string

// Outcomes of a tool call.
const (
	Success        Outcome = "success"
	Invalid        Outcome = "invalid"
	Blocked        Outcome = "blocked"
	Denied         Outcome = "denied"
	UpstreamError  Outcome = "upstream_error"
	TransportError Outcome = "transport_error"
)

// Outcomes are every outcome, in the order the API's spec lists them.
var Outcomes = []Outcome{Success, Invalid, Blocked, Denied, UpstreamError, TransportError}

// Store is what the writer needs of the database.
type Store interface {
	InsertToolCalls(ctx context.Context, calls []store.ToolCall) error
	PruneToolCalls(ctx context.Context, keep int64, before time.Time) error
}

// Options bound the audit.
type Options struct {
	// Queue is how many records may wait for the writer (default 4096).
	Queue int
	// Bounds keep the table bounded (see retention.Bounds for defaults).
	retention.Bounds
	// Linger is how long the writer waits for more records before it
	// stores a batch (default 20 ms): one insert for many calls keeps the
	// database's CPU off the calls' path. Readers flush first, so they
	// never wait on it.
	Linger time.Duration
	// Now is the clock the age bound is applied by (nil: time.Now).
	Now func() time.Time
}

const maxBatch = 256

// Writer stores records in the background.
type Writer struct {
	log     *slog.Logger
	st      Store
	opts    Options
	queue   chan store.ToolCall
	loop    lifecycle.Loop
	closing sync.RWMutex
	closed  bool // under closing
	dropped atomic.Int64
	flush   chan struct{} // asks the writer to store its batch now
	// flushes signal waiters of Flush after each stored batch.
	mu      sync.Mutex
	pending int64 // records queued and not yet stored
	settled *sync.Cond
}

// New returns a writer; it stores from Start, and Stop stops it after
// storing what is queued.
func New(log *slog.Logger, st Store, opts Options) *Writer {
	if opts.Queue <= 0 {
		opts.Queue = 4096
	}
	opts.Bounds = opts.WithDefaults()
	if opts.Linger <= 0 {
		opts.Linger = 20 * time.Millisecond
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	w := &Writer{log: log, st: st, opts: opts, queue: make(chan store.ToolCall, opts.Queue), flush: make(chan struct{}, 1)}
	w.settled = sync.NewCond(&w.mu)
	return w
}

// Record queues a record. A full queue makes the caller wait (a tool call
// is never made without its record, and the database sets the pace) until
// ctx ends; only then, or after Stop, is the record dropped and counted.
func (w *Writer) Record(ctx context.Context, c store.ToolCall) {
	w.mu.Lock()
	w.pending++
	w.mu.Unlock()
	// Held while queueing, so Stop waits for records on their way in and
	// none is queued after the writer stopped reading.
	w.closing.RLock()
	defer w.closing.RUnlock()
	if !w.closed {
		select {
		case w.queue <- c:
			return
		case <-ctx.Done():
		}
	}
	w.dropped.Add(1)
	w.log.Warn("tool call not audited", "service", c.ServiceID, "tool", c.ToolID, "outcome", c.Outcome)
	w.settle(1)
}

// Dropped counts records that could not be queued.
func (w *Writer) Dropped() int64 { return w.dropped.Load() }

// Flush waits until every record queued before it is stored (or failed to
// be): for readers that must see their own calls, and tests.
func (w *Writer) Flush(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		w.settled.Broadcast()
		w.mu.Unlock()
	})
	defer stop()
	select {
	case w.flush <- struct{}{}:
	default: // a flush is asked for already
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.pending > 0 && ctx.Err() == nil {
		w.settled.Wait()
	}
}

func (w *Writer) settle(n int64) {
	w.mu.Lock()
	w.pending -= n
	w.settled.Broadcast()
	w.mu.Unlock()
}

// Start starts the writer, which prunes the table at once and then every
// PruneEvery.
func (w *Writer) Start(ctx context.Context) error { return w.loop.Start(ctx, w.run) }

// Stop refuses further records, stores what is queued and stops the writer.
func (w *Writer) Stop(ctx context.Context) error {
	w.closing.Lock()
	w.closed = true
	w.closing.Unlock()
	return w.loop.Stop(ctx)
}

func (w *Writer) run(ctx context.Context) {
	prune := time.NewTicker(w.opts.PruneEvery)
	defer prune.Stop()
	w.prune()
	batch := make([]store.ToolCall, 0, maxBatch)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	storeBatch := func() {
		if len(batch) > 0 {
			w.write(batch)
			batch = batch[:0]
		}
		linger.Stop()
	}
	for {
		select {
		case c := <-w.queue:
			if len(batch) == 0 {
				linger.Reset(w.opts.Linger)
			}
			if batch = append(batch, c); len(batch) == maxBatch {
				storeBatch()
			}
		case <-linger.C:
			storeBatch()
		case <-w.flush:
			// Take what is queued too: the flush waits for it.
			for drained := false; !drained && len(batch) < maxBatch; {
				select {
				case c := <-w.queue:
					batch = append(batch, c)
				default:
					drained = true
				}
			}
			storeBatch()
			if len(w.queue) > 0 {
				select {
				case w.flush <- struct{}{}: // more than one batch was waiting
				default:
				}
			}
		case <-prune.C:
			w.prune()
		case <-ctx.Done():
			for {
				select {
				case c := <-w.queue:
					if batch = append(batch, c); len(batch) == maxBatch {
						storeBatch()
					}
				default:
					storeBatch()
					return
				}
			}
		}
	}
}

func (w *Writer) write(batch []store.ToolCall) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.st.InsertToolCalls(ctx, batch); err != nil {
		w.dropped.Add(int64(len(batch)))
		w.log.Error("store tool call records", "count", len(batch), "err", err)
	}
	w.settle(int64(len(batch)))
}

func (w *Writer) prune() { w.opts.Apply(w.log, "tool call records", w.opts.Now(), w.st.PruneToolCalls) }

// Call is an audit record.
type Call struct {
	ID         int64
	At         time.Time
	PID        *int64
	ServiceID  string
	ToolID     string
	Policy     string
	ApprovalID *string
	Outcome    string
	Status     *int
	DurationMs float64
	Source     string
	Parameters map[string]any
	KeyID      string
}

// Lister reads records.
type Lister interface {
	ListToolCalls(ctx context.Context, f store.ToolCallFilter) ([]store.ToolCall, error)
}

// List returns records, newest first, after storing what is queued (a
// client sees its own calls); more says whether more follow.
func (w *Writer) List(ctx context.Context, st Lister, f store.ToolCallFilter) ([]Call, bool, error) {
	w.Flush(ctx)
	limit := f.Limit
	f.Limit++
	rows, err := st.ListToolCalls(ctx, f)
	if err != nil {
		return nil, false, err
	}
	more := len(rows) > limit
	if more {
		rows = rows[:limit]
	}
	out := make([]Call, 0, len(rows))
	for _, r := range rows {
		out = append(out, Call{ID: r.ID, At: r.At, PID: r.PID, ServiceID: r.ServiceID, ToolID: r.ToolID, Policy: r.Policy,
			ApprovalID: r.ApprovalID, Outcome: r.Outcome, Status: r.Status, DurationMs: r.DurationMs, Source: r.Source, Parameters: r.Parameters, KeyID: r.KeyID})
	}
	return out, more, nil
}
