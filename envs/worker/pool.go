package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Errors of Get.
var (
	ErrClosed     = errors.New("worker pool is closed")
	ErrNotStarted = errors.New("worker pool is not started")
)

// SpawnFunc starts one worker and waits until it is warm.
type SpawnFunc func(ctx context.Context) (*Worker, error)

// PoolConfig shapes a Pool.
type PoolConfig struct {
	Size         int           // warm workers kept ready
	StartTimeout time.Duration // a worker not warm by then is replaced
	// Lend: every worker Get hands out comes back through Return, so while
	// it is out it still fills its slot and is not replaced. Without it a
	// worker taken is gone and its slot is refilled.
	Lend bool
	// Keep is how many returned workers a lending pool keeps ready (at
	// least Size): a pool that grew under load to serve its concurrency
	// keeps its workers instead of discarding each returning one and
	// spawning anew for the next waiter.
	Keep int
	// RefillAfterRun refills a taken worker's slot shortly after its
	// execution ends (Refilled) instead of refillDelay after it was taken:
	// for workers that are cheap to start (forked from a template). The
	// refill then competes neither with the execution that took the worker
	// nor with the recording of its result. Waiters still get spawns at
	// once.
	RefillAfterRun bool
}

// Pool keeps Size warm workers ready and refills in the background. It never
// hands out a worker whose process has died.
type Pool struct {
	log          *slog.Logger
	spawn        SpawnFunc
	size         int
	keep         int
	startTimeout time.Duration
	lend         bool
	refillDelay  time.Duration
	afterRun     bool

	wake    chan struct{}
	stop    chan struct{}
	wg      sync.WaitGroup
	startMu sync.Mutex  // orders Start and Stop
	begun   atomic.Bool // read by every Get
	stopped bool

	mu sync.Mutex
	// ready holds the warm workers; Get takes the last. A returned worker
	// goes last, so a lone client keeps reusing one warm worker instead
	// of alternating between all of them (each switch costs the other
	// worker's cold caches and a wake-up); a spawned one goes first, so
	// spawns are handed out oldest first.
	ready       []*Worker
	avail       chan struct{} // signalled when ready gains a worker
	capacity    int           // kept workers and every spawn in flight
	spawning    int
	failures    int64 // spawns that failed, ever
	streak      int   // consecutive failures, for back-off
	waiting     int   // callers of Get waiting for a worker
	lent        int   // workers out that will come back through Return
	maxSpawning int
	retryAt     time.Time
	failed      chan struct{} // closed and replaced on every failed spawn
	lastError   string
	served      int64
	started     int64         // spawns that became warm, ever
	warm        chan struct{} // closed when the first spawn becomes warm

	landed func() // tests: runs once each spawn has landed (or failed)
}

// Stats describe a pool's health.
type Stats struct {
	Size      int    `json:"size"`
	Ready     int    `json:"ready"`
	Spawning  int    `json:"spawning"`
	Lent      int    `json:"lent"`
	Started   int64  `json:"started"`
	Failures  int64  `json:"failures"`
	Served    int64  `json:"served"`
	LastError string `json:"lastError,omitempty"`
}

// NewPool returns a pool of warm workers; Start starts it.
func NewPool(log *slog.Logger, cfg PoolConfig, spawn SpawnFunc) *Pool {
	size := max(cfg.Size, 1)
	keep := max(cfg.Keep, size)
	p := &Pool{
		log: log, spawn: spawn, size: size, keep: keep, startTimeout: cfg.StartTimeout, lend: cfg.Lend, refillDelay: refillDelay,
		maxSpawning: max(size, 2*runtime.NumCPU()),
		capacity:    keep + max(size, 2*runtime.NumCPU()),
		avail:       make(chan struct{}, 1),
		wake:        make(chan struct{}, 1),
		stop:        make(chan struct{}),
		failed:      make(chan struct{}),
		warm:        make(chan struct{}),
	}
	p.afterRun = cfg.RefillAfterRun
	return p
}

// Start starts filling the pool and waits until its first worker is warm:
// a configuration whose workers cannot start (an interpreter that cannot
// import a preload module) fails here, with the spawn's error, rather than
// at every execution. It gives up after failStreak failures in a row.
func (p *Pool) Start(ctx context.Context) error {
	p.startMu.Lock()
	if p.begun.Load() || p.stopped {
		p.startMu.Unlock()
		return errors.New("worker pool: started twice or after Stop")
	}
	p.begun.Store(true)
	p.wg.Add(1)
	go p.refill()
	p.startMu.Unlock()
	for {
		p.mu.Lock()
		failed, streak, lastErr := p.failed, p.streak, p.lastError
		p.mu.Unlock()
		if streak >= failStreak {
			return fmt.Errorf("no worker could be started (%d failures in a row): %s", streak, lastErr)
		}
		select {
		case <-p.warm:
			return nil
		case <-failed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for the first warm worker: %w", ctx.Err())
		case <-p.stop:
			return ErrClosed
		}
	}
}

// refillDelay is how long a taken worker's slot waits to be refilled.
const refillDelay = 20 * time.Millisecond

// failStreak is how many spawns in a row must fail before Get stops waiting
// and reports the failure instead.
const failStreak = 3

// Get takes a warm worker, waiting for one if none is ready. When spawns keep
// failing it returns the last spawn error rather than waiting forever.
func (p *Pool) Get(ctx context.Context) (*Worker, error) {
	if !p.begun.Load() {
		return nil, ErrNotStarted
	}
	// A warm worker at hand: no waiting, no demand.
	if w, ok := p.pop(); ok {
		if w, ok := p.take(w); ok {
			return w, nil
		}
	}
	// Waiting counts as demand: the pool spawns for waiters too, not only to
	// refill its warm workers.
	p.mu.Lock()
	p.waiting++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.waiting--
		p.mu.Unlock()
	}()
	p.poke()
	for {
		if w, ok := p.pop(); ok {
			if w, ok := p.take(w); ok {
				return w, nil
			}
			continue
		}
		p.mu.Lock()
		failed, streak, lastErr := p.failed, p.streak, p.lastError
		p.mu.Unlock()
		if streak >= failStreak {
			return nil, fmt.Errorf("no worker could be started (%d failures in a row): %s", streak, lastErr)
		}
		select {
		case <-p.avail:
		case <-failed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-p.stop:
			return nil, ErrClosed
		}
	}
}

// pop takes the last ready worker, if any.
func (p *Pool) pop() (*Worker, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.ready)
	if n == 0 {
		return nil, false
	}
	w := p.ready[n-1]
	p.ready[n-1] = nil
	p.ready = p.ready[:n-1]
	if n > 1 {
		p.signal() // another waiter may take the next one
	}
	return w, true
}

// push adds a warm worker, last (taken next) or first (taken after all the
// others), unless the pool holds limit already. It runs under p.mu.
func (p *Pool) push(w *Worker, last bool, limit int) bool {
	if len(p.ready) >= limit {
		return false
	}
	if last {
		p.ready = append(p.ready, w)
	} else {
		p.ready = slices.Insert(p.ready, 0, w)
	}
	p.signal()
	return true
}

// signal wakes one waiter of Get; a signal already pending suffices.
func (p *Pool) signal() {
	select {
	case p.avail <- struct{}{}:
	default:
	}
}

// take hands out a worker from the ready queue unless it died, and schedules
// the refill of its slot.
func (p *Pool) take(w *Worker) (*Worker, bool) {
	// Refill a little later: a spawn is tens of milliseconds of CPU that
	// would otherwise compete with the execution that took this worker and
	// with the host returning its result. Under sustained load spawns run
	// back to back regardless: each one that lands pokes the pool again. A
	// lent worker keeps its slot: only Return can free it. A RefillAfterRun
	// pool refills when the execution ends (Refilled).
	dead := w.Dead()
	if dead || (!p.lend && !p.afterRun) {
		time.AfterFunc(p.refillDelay, p.poke)
	}
	if dead {
		p.log.Warn("discarding a warm worker that died", "exit", w.h.Exit().String())
		w.Close()
		return nil, false
	}
	p.mu.Lock()
	p.served++
	if p.lend {
		p.lent++
	}
	p.mu.Unlock()
	return w, true
}

// Refilled says an execution of a RefillAfterRun pool has ended: the slot
// its worker was taken from is refilled now.
func (p *Pool) Refilled() {
	if p.afterRun {
		time.AfterFunc(refillAfterRunDelay, p.poke)
	}
}

// refillAfterRunDelay: a fork is milliseconds of the template's CPU, which
// right after the execution would compete with the host recording and
// returning its result (+0.35 ms on a warm Python execution, p50, on two
// cores; docs/benchmarks.md). Waiters still get spawns at once.
const refillAfterRunDelay = 2 * time.Millisecond

// Return gives back a worker lent by Get (a pool that does not lend takes
// nothing back). A reusable one is kept if it is alive and fewer than Keep
// are ready; otherwise (false) the caller must close it and its slot is refilled.
func (p *Pool) Return(w *Worker, reusable bool) bool {
	if !p.lend {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lent--
	kept := false
	select {
	case <-p.stop:
	default:
		// Room among the warm slots; the queue itself also has room for
		// every spawn in flight, so a landing spawn is never left with
		// nowhere to go.
		kept = reusable && !w.Dead() && p.push(w, true, p.keep)
	}
	if !kept {
		time.AfterFunc(p.refillDelay, p.poke)
	}
	return kept
}

// Stats reports the pool's health.
func (p *Pool) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Size: p.size, Ready: len(p.ready), Spawning: p.spawning, Lent: p.lent, Started: p.started,
		Failures: p.failures, Served: p.served, LastError: p.lastError}
}

// Stop stops refilling, waits for the spawns in flight (they are
// cancelled) and kills every warm worker, no longer than ctx allows. A
// second Stop does nothing.
func (p *Pool) Stop(ctx context.Context) error {
	p.startMu.Lock()
	if p.stopped {
		p.startMu.Unlock()
		return nil
	}
	p.stopped = true
	close(p.stop)
	p.startMu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.wg.Wait()
		p.mu.Lock()
		ready := p.ready
		p.ready = nil
		p.mu.Unlock()
		for _, w := range ready {
			w.Close()
		}
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("worker pool still stopping: %w", ctx.Err())
	}
}

func (p *Pool) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

func (p *Pool) refill() {
	defer p.wg.Done()
	for {
		var retry <-chan time.Time
		var t *time.Timer
		if wait := p.startMore(); wait > 0 {
			t = time.NewTimer(wait)
			retry = t.C
		}
		select {
		case <-p.wake:
		case <-retry:
		case <-p.stop:
		}
		if t != nil {
			t.Stop()
		}
		select {
		case <-p.stop:
			return
		default:
		}
	}
}

// startMore starts the spawns needed to fill the pool. After failures it
// spawns one at a time with exponential back-off (up to 5 s), returning how
// long to wait before the next try.
func (p *Pool) startMore() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	need := spawnsNeeded(p.size, p.lent, p.waiting, len(p.ready), p.spawning, p.maxSpawning)
	if p.streak > 0 {
		if wait := time.Until(p.retryAt); wait > 0 {
			return wait
		}
		need = min(need, 1-p.spawning)
	}
	for range max(need, 0) {
		p.spawning++
		p.wg.Add(1)
		go p.spawnOne()
	}
	return 0
}

// spawnsNeeded is how many spawns to start: enough for the warm slots that
// neither a ready nor a lent worker fills, and for whoever waits, with no
// more at once than the machine can run in parallel.
func spawnsNeeded(size, lent, waiting, ready, spawning, maxSpawning int) int {
	return min(max(size-lent, 0)+waiting-ready, maxSpawning) - spawning
}

func (p *Pool) spawnOne() {
	defer p.wg.Done()
	if p.landed != nil {
		defer p.landed()
	}
	defer p.poke()
	ctx, cancel := context.WithTimeout(context.Background(), p.startTimeout)
	defer cancel()
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	w, err := p.spawn(ctx)
	// A worker not kept is closed after the lock is released: closing
	// waits for the process to be reaped, which Get, Return and Stats
	// must not wait for.
	var surplus *Worker
	defer func() {
		if surplus != nil {
			surplus.Close()
		}
	}()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err == nil {
		select {
		case <-p.stop:
			surplus = w
		default:
			if !p.push(w, false, p.capacity) { // only if warm slots and every spawn are full
				surplus = w
			}
		}
	}
	p.spawning--
	if err == nil {
		p.started++
		p.streak = 0
		if p.started == 1 {
			close(p.warm)
		}
		return
	}
	p.failures++
	p.streak++
	p.lastError = err.Error()
	close(p.failed)
	p.failed = make(chan struct{})
	p.retryAt = time.Now().Add(min(time.Duration(1<<min(p.streak, 7))*20*time.Millisecond, 5*time.Second))
	select {
	case <-p.stop:
	default:
		p.log.Warn("worker failed to start", "err", err)
	}
}
