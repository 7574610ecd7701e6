package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cyrnel/cyrnel/envs/module"
)

// Errors of Runner.Execute.
var (
	ErrQueueFull = errors.New("execution queue is full")
	ErrTornDown  = errors.New("environment is torn down")
)

// reapDelay is how long a spent worker waits before it is killed and reaped.
const reapDelay = 10 * time.Millisecond

// RunnerConfig shapes a Runner.
type RunnerConfig struct {
	PoolSize     int           // warm workers kept ready
	Concurrency  int           // executions running at once; more wait as queued
	QueueLimit   int           // executions allowed to wait beyond Concurrency
	StartTimeout time.Duration // a worker not warm by then is replaced
	// Reuse lets a worker serve further executions after one that ended
	// cleanly (the TypeScript runtime: a fresh goja runtime per execution,
	// in a long-lived process). Without it each execution gets a fresh
	// worker (Python: a fresh interpreter).
	Reuse bool
	// RefillAfterRun: see PoolConfig.
	RefillAfterRun bool
	// Grace is how long a reusable worker gets to stop an execution by
	// itself after a kill or its timeout before its process is killed.
	Grace time.Duration
	// Stubs, when set, shapes what the runtime builds its tool stubs from
	// and serves its toolDocs requests (the Python runtime's help()).
	Stubs ToolStubs
	// Variant, when set, is a second kind of worker: the executions it
	// takes run in workers of a pool of its own, under the same
	// concurrency and queue.
	Variant *Variant
}

// Variant is a Runner's second kind of worker, for the executions that
// need what the runner's own workers leave out (the Python environment's
// programs that await: asyncio). Every field is required.
type Variant struct {
	Name  string    // Status reports its pool as Name+"Pool"
	Spawn SpawnFunc // starts one of its workers
	// Takes says whether an execution runs in one of its workers.
	Takes func(module.ExecutionInput) bool
}

// ToolStubs renders tools for a runtime: Stub is one listTools entry (it
// must stay small: a program that touches a service gets all of its tools),
// Docs the documentation of one tool.
type ToolStubs interface {
	Stub(module.Tool) any
	Docs(module.ToolDocsInput) string
}

// Runner is the part of an environment that runs executions in pooled
// workers: queueing and concurrency, kills, and reaping spent workers. Both
// environments are built on it.
type Runner struct {
	log     *slog.Logger
	cfg     RunnerConfig
	pool    *Pool
	variant *Pool // the Variant's workers; nil without one
	slots   chan struct{}

	mu       sync.Mutex
	waiting  int // executions in Execute: queued or running
	running  int
	flights  map[int64]context.CancelFunc
	closed   bool
	inflight sync.WaitGroup
	reaping  sync.WaitGroup
}

// NewRunner returns a runner whose workers come from spawn; Start starts it.
func NewRunner(log *slog.Logger, cfg RunnerConfig, spawn SpawnFunc) *Runner {
	pc := PoolConfig{Size: cfg.PoolSize, StartTimeout: cfg.StartTimeout, Lend: cfg.Reuse, RefillAfterRun: cfg.RefillAfterRun,
		// Reused workers serve up to Concurrency executions at once:
		// keep that many rather than respawn above PoolSize.
		Keep: cfg.Concurrency}
	r := &Runner{
		log: log, cfg: cfg,
		pool:    NewPool(log, pc, spawn),
		slots:   make(chan struct{}, max(cfg.Concurrency, 1)),
		flights: map[int64]context.CancelFunc{},
	}
	if cfg.Variant != nil {
		r.variant = NewPool(log.With("pool", cfg.Variant.Name), pc, cfg.Variant.Spawn)
	}
	return r
}

// A nil *Runner is an environment not set up, or torn down: Execute fails
// with ErrTornDown, Kill and Stop do nothing, Status is empty.

// Start fills the pools and waits until the first worker of each is warm,
// so a configuration whose workers cannot start fails here (see
// Pool.Start). Both pools start at once, as each may import a large
// preload; the first to fail ends the other's wait.
func (r *Runner) Start(ctx context.Context) error {
	if r.variant == nil {
		return r.pool.Start(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := func(p *Pool, errs chan<- error) {
		err := p.Start(ctx)
		if err != nil {
			cancel()
		}
		errs <- err
	}
	variant, own := make(chan error, 1), make(chan error, 1)
	go start(r.variant, variant)
	go start(r.pool, own)
	return firstCause(<-variant, <-own)
}

// firstCause keeps the error that is not the other's cancellation.
func firstCause(a, b error) error {
	switch {
	case a != nil && b != nil && errors.Is(a, context.Canceled) && !errors.Is(b, context.Canceled):
		return b
	case a != nil:
		return a
	}
	return b
}

// poolFor is the pool an execution's worker comes from.
func (r *Runner) poolFor(in module.ExecutionInput) *Pool {
	if r.variant != nil && r.cfg.Variant.Takes(in) {
		return r.variant
	}
	return r.pool
}

// Execute runs one execution: queued until a slot and a warm worker are
// free, then run; a spent worker is reaped off the critical path.
func (r *Runner) Execute(ctx context.Context, b module.Bindings, in module.ExecutionInput) (module.Result, error) {
	if r == nil {
		return module.Result{}, ErrTornDown
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return module.Result{}, ErrTornDown
	}
	if r.waiting >= r.cfg.QueueLimit+r.cfg.Concurrency {
		r.mu.Unlock()
		return module.Result{}, fmt.Errorf("%w (%d waiting)", ErrQueueFull, r.cfg.QueueLimit)
	}
	r.waiting++
	r.flights[in.EID] = cancel
	r.inflight.Add(1)
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.waiting--
		delete(r.flights, in.EID)
		r.mu.Unlock()
		r.inflight.Done()
	}()

	b.SetState(in.EID, module.StateQueued)
	canceled := module.Result{Exit: module.ExitCanceled, Reason: module.ReasonKilled}
	select {
	case r.slots <- struct{}{}:
	case <-ctx.Done():
		return canceled, nil
	}
	r.count(1)
	defer func() {
		r.count(-1)
		<-r.slots
	}()
	pool := r.poolFor(in)
	w, err := r.worker(ctx, pool)
	if err != nil {
		if ctx.Err() != nil {
			return canceled, nil
		}
		return module.Result{}, fmt.Errorf("get a worker: %w", err)
	}
	res, clean := w.Run(ctx, b, Request{Input: in, OutputLimit: in.Options.OutputLimitBytes, Reuse: r.cfg.Reuse, Grace: r.cfg.Grace, Stubs: r.cfg.Stubs})
	pool.Refilled()
	if r.cfg.Reuse && pool.Return(w, clean) {
		return res, nil
	}
	// Reaping a spent worker (its sandbox torn down by the kernel) is
	// cleanup: started a little later so it does not compete with the host
	// recording and returning this result.
	r.reaping.Add(1)
	time.AfterFunc(reapDelay, func() {
		defer r.reaping.Done()
		w.Close()
	})
	return res, nil
}

// worker takes a warm worker from pool, or waits while one is forked
// or spawned, as the span execution.start of the execution's trace: the
// tracer is the one of the span ctx carries (the host's, or a no-op one
// when it does not trace), so the environment needs no tracing of its own.
func (r *Runner) worker(ctx context.Context, pool *Pool) (*Worker, error) {
	ctx, span := trace.SpanFromContext(ctx).TracerProvider().Tracer(tracerName).Start(ctx, "execution.start")
	defer span.End()
	w, err := pool.Get(ctx)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
	}
	return w, err
}

// tracerName is the instrumentation scope of the environments' spans.
const tracerName = "github.com/cyrnel/cyrnel/envs/worker"

func (r *Runner) count(d int) {
	r.mu.Lock()
	r.running += d
	r.mu.Unlock()
}

// Kill cancels a queued or running execution; unknown eids are ignored.
func (r *Runner) Kill(eid int64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	cancel := r.flights[eid]
	r.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Status reports what runs and the pools' health.
func (r *Runner) Status() map[string]any {
	if r == nil {
		return map[string]any{}
	}
	r.mu.Lock()
	st := map[string]any{"running": r.running, "queued": r.waiting - r.running, "concurrency": r.cfg.Concurrency, "pool": r.pool.Stats()}
	r.mu.Unlock()
	if r.variant != nil {
		st[r.cfg.Variant.Name+"Pool"] = r.variant.Stats()
	}
	return st
}

// Counts reports the pools' workers by state, together.
func (r *Runner) Counts() module.WorkerCounts {
	if r == nil {
		return module.WorkerCounts{}
	}
	st := r.pool.Stats()
	c := module.WorkerCounts{Ready: st.Ready, Starting: st.Spawning, Busy: st.Lent}
	if r.variant != nil {
		a := r.variant.Stats()
		c.Ready, c.Starting, c.Busy = c.Ready+a.Ready, c.Starting+a.Spawning, c.Busy+a.Lent
	}
	return c
}

// Stop kills what still runs, waits for it and its workers, and empties
// the pools, no longer than ctx allows. A second Stop does nothing.
func (r *Runner) Stop(ctx context.Context) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	for _, cancel := range r.flights {
		cancel()
	}
	r.mu.Unlock()
	done := make(chan struct{})
	go func() {
		r.inflight.Wait()
		r.reaping.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("executions still ending: %w", ctx.Err())
	}
	if r.variant != nil {
		return errors.Join(r.pool.Stop(ctx), r.variant.Stop(ctx))
	}
	return r.pool.Stop(ctx)
}
