package worker

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/envtest"
	"github.com/cyrnel/cyrnel/envs/module"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// failingWorker starts a real interpreter that dies before it is ready, as
// one does whose preload module is missing.
func failingWorker(t *testing.T) SpawnFunc {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is needed: ", err)
	}
	return func(ctx context.Context) (*Worker, error) {
		w, err := Start(ctx, discard(), Plain{}, Command{Path: python, Args: []string{"-I", "-S", "-c", "import no_such_module_here"}})
		if err != nil {
			return nil, err
		}
		if err := w.WaitReady(ctx); err != nil {
			w.Close()
			return nil, err
		}
		return w, nil
	}
}

// A pool whose workers cannot start says so at Start, with the worker's
// own error, instead of at every Get.
func TestStartFailsWhenNoWorkerCanStart(t *testing.T) {
	t.Parallel()
	p := NewPool(discard(), PoolConfig{Size: 1, StartTimeout: 10 * time.Second}, failingWorker(t))
	defer p.Stop(context.Background())
	err := p.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no_such_module_here") {
		t.Fatalf("start: %v", err)
	}
}

// Start waits for a warm worker; Get before Start fails instead of waiting
// forever; Stop twice is harmless; Get after Stop says the pool is closed.
func TestPoolLifecycle(t *testing.T) {
	t.Parallel()
	p := NewPool(discard(), PoolConfig{Size: 1, StartTimeout: 30 * time.Second}, func(ctx context.Context) (*Worker, error) { return idleWorker(t, ctx) })
	ctx := context.Background()
	if _, err := p.Get(ctx); !errors.Is(err, ErrNotStarted) {
		t.Fatalf("get before start: %v", err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Ready != 1 || st.Started != 1 {
		t.Fatalf("after start: %+v", st)
	}
	for range 2 {
		if err := p.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Get(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("get after stop: %v", err)
	}
}

// slowKill launches plain workers whose Kill blocks until released, the way
// a sandbox teardown can take its time.
type slowKill struct {
	killing chan struct{}
	release chan struct{}
}

func (s slowKill) Launch(ctx context.Context, c Command, f Files) (Handle, error) {
	h, err := Plain{}.Launch(ctx, c, f)
	if err != nil {
		return nil, err
	}
	return slowHandle{Handle: h, s: s}, nil
}

type slowHandle struct {
	Handle
	s slowKill
}

func (h slowHandle) Kill() {
	select {
	case h.s.killing <- struct{}{}:
	default:
	}
	<-h.s.release
	h.Handle.Kill()
}

// A spawn that lands on a stopped pool closes its worker without holding
// the pool's lock: Stats (and Get, Return) do not wait for the reaping.
func TestSurplusWorkerClosedOutsideTheLock(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is needed: ", err)
	}
	sk := slowKill{killing: make(chan struct{}, 1), release: make(chan struct{})}
	spawned := make(chan struct{})
	p := NewPool(discard(), PoolConfig{Size: 1, StartTimeout: 30 * time.Second}, func(ctx context.Context) (*Worker, error) {
		close(spawned)
		<-ctx.Done() // held until the pool stops, then lands all the same
		w, err := Start(context.Background(), discard(), sk, Command{Path: python, Args: []string{"-I", "-S", "-c",
			"import os, time\nos.write(4, b'{\"jsonrpc\":\"2.0\",\"method\":\"ready\",\"params\":{}}\\n')\ntime.sleep(60)"}})
		if err != nil {
			return nil, err
		}
		return w, w.WaitReady(context.Background())
	})
	go p.Start(context.Background())
	<-spawned
	stopped := make(chan struct{})
	go func() { p.Stop(context.Background()); close(stopped) }()
	<-sk.killing // the surplus worker is being closed
	stats := make(chan Stats)
	go func() { stats <- p.Stats() }()
	select {
	case <-stats:
	case <-time.After(10 * time.Second):
		t.Error("Stats waited for a worker being closed")
	}
	close(sk.release)
	<-stopped
}

// Once a plain worker is reaped its pid may be recycled: a later Kill must
// not signal whatever process group now has that id. The recycling is
// simulated by pointing the spent handle at a live group of our own.
func TestPlainKillAfterReapSparesARecycledPid(t *testing.T) {
	t.Parallel()
	h, err := Plain{}.Launch(context.Background(), Command{Path: "/bin/true"}, Files{})
	if err != nil {
		t.Fatal(err)
	}
	<-h.Done()
	stranger := exec.Command("/bin/sleep", "60")
	stranger.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	ph := h.(*plainHandle)
	ph.pid = stranger.Process.Pid
	h.Kill()
	// Then we end the stranger ourselves, gently: it dies of SIGTERM unless
	// the kill above reached it (a pending SIGKILL wins).
	if err := stranger.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	_ = stranger.Wait()
	if sig := stranger.ProcessState.Sys().(syscall.WaitStatus).Signal(); sig != syscall.SIGTERM {
		t.Fatalf("the kill of a reaped worker hit the group that took its pid (%v)", sig)
	}
}

// A runner starts its pool, stops twice without harm, and refuses work
// once stopped; a nil runner (an environment not set up) stops too.
func TestRunnerLifecycle(t *testing.T) {
	t.Parallel()
	r := NewRunner(discard(), RunnerConfig{PoolSize: 1, Concurrency: 1, StartTimeout: 30 * time.Second},
		func(ctx context.Context) (*Worker, error) { return idleWorker(t, ctx) })
	ctx := context.Background()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := r.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Execute(ctx, nil, module.ExecutionInput{EID: 1}); !errors.Is(err, ErrTornDown) {
		t.Fatalf("execute after stop: %v", err)
	}
	var none *Runner
	if err := none.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// A runner's Variant takes the executions it says it takes, from a pool of
// its own, under the runner's one concurrency and queue: with one slot
// and one place in the queue, an execution in the variant's pool runs, one
// in the main pool waits for the slot, a third is refused, and the
// waiting one runs once the first is killed.
func TestVariantSharesTheRunnersLimits(t *testing.T) {
	t.Parallel()
	// Each pool's workers come from its own spawn: counted apart.
	var mainSpawns, oddSpawns atomic.Int64
	spawn := func(n *atomic.Int64) SpawnFunc {
		return func(ctx context.Context) (*Worker, error) {
			n.Add(1)
			return idleWorker(t, ctx)
		}
	}
	r := NewRunner(discard(), RunnerConfig{PoolSize: 1, Concurrency: 1, QueueLimit: 1, StartTimeout: 30 * time.Second,
		Variant: &Variant{Name: "odd", Spawn: spawn(&oddSpawns), Takes: func(in module.ExecutionInput) bool { return in.EID%2 == 1 }}}, spawn(&mainSpawns))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop(context.Background())
	if mainSpawns.Load() == 0 || oddSpawns.Load() == 0 {
		t.Fatalf("spawns after start: main %d, variant %d; want each pool's from its own", mainSpawns.Load(), oddSpawns.Load())
	}
	rec := envtest.NewRecorder()
	ended := make(chan int64, 2)
	run := func(eid int64) {
		go func() {
			r.Execute(ctx, rec, module.ExecutionInput{EID: eid, Code: "pass"})
			ended <- eid
		}()
	}
	state := func(eid int64, s module.ExecState) {
		t.Helper()
		if err := rec.WaitFor(ctx, eid, func(x envtest.Run) bool { return slices.Contains(x.States, s) }); err != nil {
			t.Fatal(err)
		}
	}
	run(1) // the variant's: its idle worker never answers
	state(1, module.StateRunning)
	run(2)
	state(2, module.StateQueued)
	if _, err := r.Execute(ctx, rec, module.ExecutionInput{EID: 3}); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("a third execution: %v, want the queue full", err)
	}
	if st := r.Status(); st["running"] != 1 || st["queued"] != 1 {
		t.Fatalf("status %v, want one running and one queued", st)
	}
	r.Kill(1)
	if eid := <-ended; eid != 1 {
		t.Fatalf("execution %d ended first", eid)
	}
	state(2, module.StateRunning)
	r.Kill(2)
	<-ended
	main, odd := r.Status()["pool"].(Stats), r.Status()["oddPool"].(Stats)
	if main.Served != 1 || odd.Served != 1 {
		t.Errorf("served: main pool %d, variant %d; want one each", main.Served, odd.Served)
	}
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if c := r.Counts(); c.Ready+c.Starting+c.Busy != 0 {
		t.Errorf("workers left in the pools after Stop: %+v", c)
	}
}

// A runner whose variant's workers cannot start fails Start with their
// error, not with the cancellation that ends the other pool's wait: that
// pool's spawn never ends by itself, so only the variant's failure can end
// Start before the test's deadline.
func TestVariantThatCannotStartFailsStart(t *testing.T) {
	t.Parallel()
	r := NewRunner(discard(), RunnerConfig{PoolSize: 1, Concurrency: 1, StartTimeout: 30 * time.Second,
		Variant: &Variant{Name: "broken", Spawn: failingWorker(t), Takes: func(module.ExecutionInput) bool { return true }}},
		func(ctx context.Context) (*Worker, error) {
			<-ctx.Done() // until Stop cancels the spawns in flight
			return nil, ctx.Err()
		})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := r.Start(ctx)
	if ctx.Err() != nil {
		t.Fatalf("start ended with the test's deadline (%v), not with the variant's failure", err)
	}
	if stop := r.Stop(context.Background()); stop != nil {
		t.Error(stop)
	}
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no_such_module_here") {
		t.Fatalf("start: %v, want the variant's spawn error", err)
	}
}
