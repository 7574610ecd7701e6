package process

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/store"
)

// scripted is an executor whose executions do what the test tells them,
// playing the environment's part through the manager's bindings.
type scripted struct {
	m     *Manager
	start chan int64                  // eid of each execution as it starts
	end   chan module.Result          // what the next execution returns
	after func(m *Manager, eid int64) // runs after Execute has returned (late events)
	kills chan int64
}

func (s *scripted) Execute(_ context.Context, in module.ExecutionInput) (string, module.Result, error) {
	s.m.SetState(in.EID, module.StateRunning)
	s.start <- in.EID
	res := <-s.end
	if s.after != nil {
		defer func() { go s.after(s.m, in.EID) }()
	}
	return "scripted", res, nil
}

func (s *scripted) Kill(_ context.Context, eid int64) error {
	s.kills <- eid
	return nil
}

func newManager(t *testing.T) (*Manager, *scripted, *store.Store) {
	t.Helper()
	st, err := store.Open(context.Background(), "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	ex := &scripted{start: make(chan int64, 8), end: make(chan module.Result, 8), kills: make(chan int64, 8)}
	m := New(slog.New(slog.NewTextHandler(io.Discard, nil)), st, ex, DefaultLimits(), "test-host")
	ex.m = m
	return m, ex, st
}

func waitIdle(t *testing.T, m *Manager, pid int64) *Process {
	t.Helper()
	p, err := m.Wait(context.Background(), pid, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if p.State != Idle {
		t.Fatalf("process %d still %s", pid, p.State)
	}
	return p
}

func TestLateEventsNeverOverwriteAFinalState(t *testing.T) {
	m, ex, _ := newManager(t)
	late := make(chan struct{})
	ex.after = func(m *Manager, eid int64) {
		// An environment reporting after its result was recorded: all ignored.
		if _, err := m.Wait(context.Background(), eid, 10*time.Second); err != nil {
			t.Error(err)
		}
		m.SetState(eid, module.StateRunning)
		m.EmitStdout(eid, []byte("late\n"))
		m.EmitOutput(eid, map[string]any{"late": true})
		m.SetError(eid, "late error")
		close(late)
	}
	p, err := m.Create(context.Background(), CreateInput{Code: "x", Autorun: true})
	if err != nil {
		t.Fatal(err)
	}
	<-ex.start
	m.EmitStdout(p.PID, []byte("on time\n"))
	ex.end <- module.Result{Exit: module.ExitSuccess}
	waitIdle(t, m, p.PID)
	<-late
	got, err := m.Get(context.Background(), p.PID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != Idle || *got.ExitState != "success" || got.Stdout != "on time\n" || len(got.Output) != 0 || got.Error != "" {
		t.Fatalf("late events changed the final state: %+v", got)
	}
}

func TestTimeoutIsNeverRecordedAsCanceled(t *testing.T) {
	m, ex, _ := newManager(t)
	p, _ := m.Create(context.Background(), CreateInput{Code: "x", Autorun: true})
	<-ex.start
	// A kill races with the environment's own timeout; the timeout wins.
	killed := make(chan *Process, 1)
	go func() {
		v, err := m.Kill(context.Background(), p.PID)
		if err != nil {
			t.Error(err)
		}
		killed <- v
	}()
	<-ex.kills
	if v := <-killed; v.State != Terminating {
		t.Fatalf("kill answered %s", v.State)
	}
	ex.end <- module.Result{Exit: module.ExitTimeout}
	got := waitIdle(t, m, p.PID)
	if *got.ExitState != "timeout" || *got.Reason != "timeout" {
		t.Fatalf("got %s/%s", *got.ExitState, *got.Reason)
	}
}

func TestSetStateIsAdvisory(t *testing.T) {
	m, ex, _ := newManager(t)
	p, _ := m.Create(context.Background(), CreateInput{Code: "x", Autorun: true})
	<-ex.start
	m.SetState(p.PID, module.StateRunning) // duplicate: ignored
	m.SetState(p.PID, module.StateQueued)  // backwards: rejected
	live, err := m.Get(context.Background(), p.PID)
	if err != nil || live.State != Running {
		t.Fatalf("state %v %v", live, err)
	}
	m.SetState(999999, module.StateRunning) // unknown eid: ignored
	ex.end <- module.Result{Exit: module.ExitFailed, Reason: module.ReasonMemoryLimit}
	if got := waitIdle(t, m, p.PID); *got.Reason != "memory_limit" || got.StartedAt == nil || got.DurationMs == nil {
		t.Fatalf("got %+v", got)
	}
}

func TestEnvironmentErrorAndInvalidExit(t *testing.T) {
	m, ex, _ := newManager(t)
	p, _ := m.Create(context.Background(), CreateInput{Code: "x", Autorun: true})
	<-ex.start
	ex.end <- module.Result{Exit: "exploded"}
	got := waitIdle(t, m, p.PID)
	if *got.ExitState != "failed" || *got.Reason != "environment_error" || got.Error == "" {
		t.Fatalf("got %+v", got)
	}
}

func TestRecoverFinishesWhatWasLeftLive(t *testing.T) {
	m, _, st := newManager(t)
	ctx := context.Background()
	var pids []int64
	for _, s := range []string{"queued", "running", "terminating", "idle"} {
		p := &store.Process{Code: "x", State: s, TimeoutMs: 1, CreatedAt: time.Now()}
		if err := st.InsertProcess(ctx, p); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, p.PID)
	}
	if err := m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	for i, pid := range pids {
		got, _ := m.Get(ctx, pid)
		if i < 3 && (got.State != Idle || *got.ExitState != "failed" || *got.Reason != "host_restart") {
			t.Fatalf("pid %d: %+v", pid, got)
		}
		if i == 3 && got.ExitState != nil {
			t.Fatalf("idle process touched: %+v", got)
		}
	}
}

func TestOutputMergeAndCap(t *testing.T) {
	m, ex, _ := newManager(t)
	m.limits.OutputBytes = 64
	p, _ := m.Create(context.Background(), CreateInput{Code: "x", Autorun: true})
	<-ex.start
	m.EmitOutput(p.PID, map[string]any{"a": 1.0, "b": 1.0})
	// The cap is on the merged object: overwriting a key many times is fine.
	for i := range 1000 {
		m.EmitOutput(p.PID, map[string]any{"b": float64(i)})
	}
	m.EmitOutput(p.PID, map[string]any{"big": string(make([]byte, 100))}) // past the cap: dropped
	live, _ := m.Get(context.Background(), p.PID)
	if live.Output["b"] != 999.0 || live.State != Running || !live.OutputTruncated {
		t.Fatalf("live view: %+v", live)
	}
	ex.end <- module.Result{Exit: module.ExitSuccess}
	got := waitIdle(t, m, p.PID)
	if len(got.Output) != 2 || got.Output["a"] != 1.0 || got.Output["b"] != 999.0 || !got.OutputTruncated {
		t.Fatalf("output %v truncated=%v", got.Output, got.OutputTruncated)
	}
}

// created runs Create with a wait in the background.
func created(m *Manager, in CreateInput) chan *Process {
	out := make(chan *Process, 1)
	go func() {
		p, err := m.Create(context.Background(), in)
		if err != nil {
			panic(err)
		}
		out <- p
	}()
	return out
}

// TestAShortExecutionIsStoredOnce: with a wait, an execution starts before
// its row is written and is stored by one write, its final row; meanwhile
// it can be read, listed and killed by pid.
func TestAShortExecutionIsStoredOnce(t *testing.T) {
	m, ex, st := newManager(t)
	m.liveWriteDelay = time.Hour
	ctx := context.Background()
	res := created(m, CreateInput{Code: "x", Ref: "short", Autorun: true, Wait: time.Minute})
	pid := <-ex.start
	if _, err := st.GetProcess(ctx, pid); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the row was written before the execution ended: %v", err)
	}
	if v, err := m.Get(ctx, pid); err != nil || v.State != Running || v.Ref != "short" {
		t.Fatalf("get while unsaved: %+v %v", v, err)
	}
	ex.end <- module.Result{Exit: module.ExitSuccess}
	p := <-res
	if p.PID != pid || p.State != Idle || *p.ExitState != "success" || p.StartedAt == nil {
		t.Fatalf("create returned %+v", p)
	}
	row, err := st.GetProcess(ctx, pid)
	if err != nil || row.State != "idle" || *row.ExitState != "success" || row.Ref != "short" || row.Runs != 1 || row.StartedAt == nil {
		t.Fatalf("stored %+v %v", row, err)
	}
	// The next pid is still new, whichever way its row is written.
	next, err := m.Create(ctx, CreateInput{Code: "y"})
	if err != nil || next.PID <= pid {
		t.Fatalf("next pid %+v %v", next, err)
	}
}

// TestARowIsStoredWhenTheExecutionLasts: an unsaved execution that lasts
// gets its row, running, before it ends.
func TestARowIsStoredWhenTheExecutionLasts(t *testing.T) {
	m, ex, st := newManager(t)
	m.liveWriteDelay = time.Millisecond
	ctx := context.Background()
	res := created(m, CreateInput{Code: "x", Autorun: true, Wait: time.Minute})
	pid := <-ex.start
	deadline := time.Now().Add(10 * time.Second)
	for {
		row, err := st.GetProcess(ctx, pid)
		if err == nil {
			if row.State != "running" || row.StartedAt == nil {
				t.Fatalf("stored while running: %+v", row)
			}
			break
		}
		if !errors.Is(err, store.ErrNotFound) || time.Now().After(deadline) {
			t.Fatalf("no row while it runs: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	ex.end <- module.Result{Exit: module.ExitFailed, Reason: module.ReasonException}
	if p := <-res; p.State != Idle || *p.ExitState != "failed" {
		t.Fatalf("create returned %+v", p)
	}
	if row, err := st.GetProcess(ctx, pid); err != nil || row.State != "idle" || *row.ExitState != "failed" {
		t.Fatalf("stored %+v %v", row, err)
	}
}

// TestARowIsStoredWhenTheWaitEnds: a wait shorter than the execution hands
// out a pid that can be read from the database at once.
func TestARowIsStoredWhenTheWaitEnds(t *testing.T) {
	m, ex, st := newManager(t)
	m.liveWriteDelay = time.Hour
	ctx := context.Background()
	res := created(m, CreateInput{Code: "x", Autorun: true, Wait: time.Millisecond})
	pid := <-ex.start
	p := <-res
	if p.PID != pid || p.State != Running {
		t.Fatalf("create returned %+v", p)
	}
	if row, err := st.GetProcess(ctx, pid); err != nil || row.State != "running" {
		t.Fatalf("stored %+v %v", row, err)
	}
	// Killed, it ends canceled.
	if v, err := m.Kill(ctx, pid); err != nil || v.State != Terminating {
		t.Fatalf("kill: %+v %v", v, err)
	}
	<-ex.kills
	ex.end <- module.Result{Exit: module.ExitCanceled}
	if p := waitIdle(t, m, pid); *p.ExitState != "canceled" || *p.Reason != "killed" {
		t.Fatalf("after kill: %+v", p)
	}
}

// TestKillBeforeTheRowIsStored: a kill reaches an execution whose row is
// not written yet, and the final row says canceled.
func TestKillBeforeTheRowIsStored(t *testing.T) {
	m, ex, st := newManager(t)
	m.liveWriteDelay = time.Hour
	ctx := context.Background()
	res := created(m, CreateInput{Code: "x", Autorun: true, Wait: time.Minute})
	pid := <-ex.start
	if v, err := m.Kill(ctx, pid); err != nil || v.State != Terminating {
		t.Fatalf("kill: %+v %v", v, err)
	}
	<-ex.kills
	ex.end <- module.Result{Exit: module.ExitCanceled}
	if p := <-res; *p.ExitState != "canceled" || *p.Reason != "killed" {
		t.Fatalf("create returned %+v", p)
	}
	if row, err := st.GetProcess(ctx, pid); err != nil || *row.ExitState != "canceled" {
		t.Fatalf("stored %+v %v", row, err)
	}
}

// failInserts makes every insert into processes fail until the returned
// function is called.
func failInserts(t *testing.T, st *store.Store) (restore func()) {
	t.Helper()
	ctx := context.Background()
	if _, err := st.DB.ExecContext(ctx, `CREATE TRIGGER no_insert BEFORE INSERT ON processes BEGIN SELECT RAISE(FAIL, 'disk full'); END`); err != nil {
		t.Fatal(err)
	}
	return func() {
		if _, err := st.DB.ExecContext(ctx, `DROP TRIGGER no_insert`); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAResultThatCannotBeStoredIsAnError: when the only row of a short
// execution cannot be written, the caller gets an error, not a pid that
// can never be read.
func TestAResultThatCannotBeStoredIsAnError(t *testing.T) {
	m, ex, st := newManager(t)
	m.liveWriteDelay = time.Hour
	errc := make(chan error, 1)
	go func() {
		_, err := m.Create(context.Background(), CreateInput{Code: "x", Autorun: true, Wait: time.Minute})
		errc <- err
	}()
	pid := <-ex.start
	failInserts(t, st)
	ex.end <- module.Result{Exit: module.ExitSuccess}
	if err := <-errc; !errors.Is(err, errNotStored) {
		t.Fatalf("create: %v", err)
	}
	if _, err := m.Get(context.Background(), pid); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get: %v", err)
	}
}

// TestAProcessThatCannotBeStoredDoesNotRunOn: when the row cannot be
// written as the wait ends, the caller gets an error, so the execution is
// killed and never stored.
func TestAProcessThatCannotBeStoredDoesNotRunOn(t *testing.T) {
	m, ex, st := newManager(t)
	m.liveWriteDelay = time.Hour
	ctx := context.Background()
	restore := failInserts(t, st)
	errc := make(chan error, 1)
	go func() {
		_, err := m.Create(ctx, CreateInput{Code: "x", Autorun: true, Wait: time.Millisecond})
		errc <- err
	}()
	pid := <-ex.start
	if err := <-errc; !errors.Is(err, errNotStored) {
		t.Fatalf("create: %v", err)
	}
	restore()
	select {
	case killed := <-ex.kills:
		if killed != pid {
			t.Fatalf("killed %d, want %d", killed, pid)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the execution was not killed")
	}
	r := m.lookup(pid)
	ex.end <- module.Result{Exit: module.ExitCanceled}
	<-r.done
	if row, err := st.GetProcess(ctx, pid); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("stored after its client was told it failed: %+v %v", row, err)
	}
}

// TestLaunchAfterShutdownBegan: an execution launched once shutdown has
// begun (the caller checked just before) never starts and is stored as
// ended by the shutdown.
func TestLaunchAfterShutdownBegan(t *testing.T) {
	m, _, st := newManager(t)
	pid, ok, err := st.ReservePID(context.Background())
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	m.mu.Lock()
	m.stopping = true
	m.mu.Unlock()
	r := m.launch(&store.Process{PID: pid, Code: "x", State: string(Queued), TimeoutMs: 1000, CreatedAt: time.Now(), Runs: 1}, true)
	<-r.done
	row, err := st.GetProcess(context.Background(), pid)
	if err != nil || row.State != "idle" || *row.ExitState != "canceled" || row.Reason != "host_shutdown" {
		t.Fatalf("stored %+v %v", row, err)
	}
	if err := m.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestALostRowIsAnErrorAlsoWhenTheWaitEndsLast: when an execution ends as
// its wait ends and its only row cannot be written, storing it for the
// waiter fails too, rather than handing out a pid that cannot be read.
func TestALostRowIsAnErrorAlsoWhenTheWaitEndsLast(t *testing.T) {
	m, ex, st := newManager(t)
	m.liveWriteDelay = time.Hour
	pid, _, err := st.ReservePID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	r := m.launch(&store.Process{PID: pid, Code: "x", State: string(Queued), TimeoutMs: 1000, CreatedAt: time.Now(), Runs: 1}, true)
	<-ex.start
	failInserts(t, st)
	ex.end <- module.Result{Exit: module.ExitSuccess}
	<-r.done
	if _, err := m.save(context.Background(), r, true); !errors.Is(err, errNotStored) {
		t.Fatalf("save after the final row was lost: %v", err)
	}
}
