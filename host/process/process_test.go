package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	return newManagerIn(t, t.TempDir(), 0)
}

// newManagerIn opens the database in dir and a manager on it, flushing
// progress every flush (0: the default).
func newManagerIn(t *testing.T, dir string, flush time.Duration) (*Manager, *scripted, *store.Store) {
	t.Helper()
	return newManagerWith(t, dir, flush, With{})
}

// newManagerWith is newManagerIn with the parts in with.
func newManagerWith(t *testing.T, dir string, flush time.Duration, with With) (*Manager, *scripted, *store.Store) {
	t.Helper()
	st := openStore(t, dir)
	m, ex := newManagerOnWith(t, st, flush, with)
	return m, ex, st
}

// openStore opens the database in dir, closed when the test ends.
func openStore(t *testing.T, dir string) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func newManagerOn(t *testing.T, st *store.Store, flush time.Duration) (*Manager, *scripted) {
	t.Helper()
	return newManagerOnWith(t, st, flush, With{})
}

func newManagerOnWith(t *testing.T, st *store.Store, flush time.Duration, with With) (*Manager, *scripted) {
	t.Helper()
	ex := &scripted{start: make(chan int64, 8), end: make(chan module.Result, 8), kills: make(chan int64, 8)}
	m := New(slog.New(slog.NewTextHandler(io.Discard, nil)), st, ex, DefaultLimits(), "test-host", flush, with)
	ex.m = m
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Before the store closes (cleanups run last first); executions a test
	// leaves blocked keep it waiting no longer than this.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		m.Stop(ctx) //nolint:errcheck // a blocked execution's test already failed
	})
	return m, ex
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
	t.Parallel()
	m, ex, _ := newManager(t)
	late := make(chan struct{})
	ex.after = func(m *Manager, eid int64) {
		// An environment reporting after its result was recorded: all ignored.
		if _, err := m.Wait(context.Background(), eid, 10*time.Second); err != nil {
			t.Error(err)
		}
		m.SetState(eid, module.StateRunning)
		m.EmitStdout(eid, []byte("late\n"))
		m.EmitOutput(eid, map[string]json.RawMessage{"late": json.RawMessage("true")})
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
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
	m, ex, _ := newManager(t)
	p, _ := m.Create(context.Background(), CreateInput{Code: "x", Autorun: true})
	<-ex.start
	ex.end <- module.Result{Exit: "exploded"}
	got := waitIdle(t, m, p.PID)
	if *got.ExitState != "failed" || *got.Reason != "environment_error" || got.Error == "" {
		t.Fatalf("got %+v", got)
	}
}

func TestStartFinishesWhatWasLeftLive(t *testing.T) {
	t.Parallel()
	m, _, st := newManager(t)
	ctx := context.Background()
	var pids []int64
	for _, s := range []string{"queued", "running", "terminating", "idle"} {
		p := &store.Process{Code: "x", State: s, TimeoutMs: 1, CreatedAt: time.Now()}
		insert(t, m, p)
		pids = append(pids, p.PID)
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	next, _ := newManagerOn(t, st, 0) // its Start recovers
	for i, pid := range pids {
		got, _ := next.Get(ctx, pid)
		if i < 3 && (got.State != Idle || *got.ExitState != "failed" || *got.Reason != "host_restart") {
			t.Fatalf("pid %d: %+v", pid, got)
		}
		if i == 3 && got.ExitState != nil {
			t.Fatalf("idle process touched: %+v", got)
		}
	}
}

func TestOutputMergeAndCap(t *testing.T) {
	t.Parallel()
	m, ex, _ := newManager(t)
	m.limits.OutputBytes = 64
	p, _ := m.Create(context.Background(), CreateInput{Code: "x", Autorun: true})
	<-ex.start
	m.EmitOutput(p.PID, map[string]json.RawMessage{"a": json.RawMessage("1"), "b": json.RawMessage("1")})
	// The cap is on the merged object: overwriting a key many times is fine.
	for i := range 1000 {
		m.EmitOutput(p.PID, map[string]json.RawMessage{"b": json.RawMessage(strconv.Itoa(i))})
	}
	big := json.RawMessage(`"` + strings.Repeat(`\u0000`, 100) + `"`)
	m.EmitOutput(p.PID, map[string]json.RawMessage{"big": big}) // past the cap: dropped
	live, _ := m.Get(context.Background(), p.PID)
	if b, _ := json.Marshal(live.Output); string(b) != `{"a":1,"b":999}` || live.State != Running || !live.OutputTruncated {
		t.Fatalf("live view: %+v", live)
	}
	// Said where the client looks: on stderr and, as stderr is too small
	// to hold it whole, in error.
	if !strings.HasPrefix(live.Stderr, `cyrnel: output key "big"`) {
		t.Fatalf("stderr %q, want the drop said", live.Stderr)
	}
	ex.end <- module.Result{Exit: module.ExitSuccess}
	got := waitIdle(t, m, p.PID)
	if b, _ := json.Marshal(got.Output); string(b) != `{"a":1,"b":999}` || !got.OutputTruncated {
		t.Fatalf("output %v truncated=%v", got.Output, got.OutputTruncated)
	}
	if want := `cyrnel: output key "big" (609 bytes) dropped: the structured output is capped at 64 bytes`; got.Error != want {
		t.Fatalf("error %q, want %q", got.Error, want)
	}
}

// insert stores rows as the manager does, through its writer.
func insert(t *testing.T, m *Manager, ps ...*store.Process) {
	t.Helper()
	for _, p := range ps {
		if err := m.w.do(func(ctx context.Context, tx *store.Tx) error { return tx.InsertProcess(ctx, p) }); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAPidIsHandedOutOnceItsRowExists: the database is the truth from the
// start: an execution starts only once its row is stored, and pids come
// from the database's sequence, one after another, across restarts too.
func TestAPidIsHandedOutOnceItsRowExists(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	var pids []int64
	for range 2 { // the second time on the database the first left
		m, ex, st := newManagerIn(t, dir, 0)
		for range 3 {
			res := make(chan *Process, 1)
			go func() {
				p, err := m.Create(ctx, CreateInput{Code: "x", Ref: "r", Autorun: true, Wait: time.Minute})
				if err != nil {
					t.Error(err)
				}
				res <- p
			}()
			pid := <-ex.start
			row, err := st.GetProcess(ctx, pid)
			if err != nil || row.State != string(Queued) || row.Ref != "r" || row.HostID != "test-host" {
				t.Fatalf("row of a started execution: %+v %v", row, err)
			}
			ex.end <- module.Result{Exit: module.ExitSuccess}
			if p := <-res; p == nil || p.PID != pid || p.State != Idle || p.HostID != "test-host" {
				t.Fatalf("create returned %+v", p)
			}
			pids = append(pids, pid)
		}
		if err := m.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		st.Close()
	}
	for i := 1; i < len(pids); i++ {
		if pids[i] != pids[i-1]+1 {
			t.Fatalf("pids jump: %v", pids)
		}
	}
}

// TestProgressIsDurable: what a running execution printed reaches its row
// at each flush, so a host that dies loses at most the last interval; the
// next start finishes it with that output kept.
func TestProgressIsDurable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	commits := &commits{c: make(chan struct{}, 1)}
	m, ex, st := newManagerWith(t, dir, 5*time.Millisecond, With{Instruments: Instruments{Observer: commits}})
	m.limits.OutputBytes = 8
	ctx := context.Background()
	p, err := m.Create(ctx, CreateInput{Code: "x", Autorun: true})
	if err != nil {
		t.Fatal(err)
	}
	<-ex.start
	// The row is read again after each commit of the writer's.
	stored := func(want func(*store.Process) bool) *store.Process {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			row, err := st.GetProcess(ctx, p.PID)
			if err != nil {
				t.Fatal(err)
			}
			if want(row) {
				return row
			}
			select {
			case <-commits.c:
			case <-deadline:
				t.Fatalf("not flushed: %+v", row)
			}
		}
	}
	m.EmitStdout(p.PID, []byte("one\n"))
	m.EmitOutput(p.PID, map[string]json.RawMessage{"k": json.RawMessage("1")})
	row := stored(func(r *store.Process) bool { return r.Stdout == "one\n" })
	if row.State != string(Running) || row.StartedAt == nil || row.Output["k"] != 1.0 {
		t.Fatalf("flushed %+v", row)
	}
	m.EmitStdout(p.PID, []byte("two\nthree\n")) // past the cap of 8 bytes
	m.EmitStderr(p.PID, []byte("err"))
	row = stored(func(r *store.Process) bool { return r.Stderr == "err" })
	if row.Stdout != "one\ntwo\n" || !row.StdoutTruncated {
		t.Fatalf("appended %+v", row)
	}

	// The host dies here; the next one on the database keeps the output.
	next, _, _ := newManagerIn(t, dir, 0) // its Start recovers
	got, err := next.Get(ctx, p.PID)
	if err != nil || got.State != Idle || *got.Reason != "host_restart" || got.Stdout != "one\ntwo\n" || got.Stderr != "err" || got.Output["k"] != 1.0 {
		t.Fatalf("after restart: %+v %v", got, err)
	}
	ex.end <- module.Result{Exit: module.ExitSuccess} // the old host's late result changes nothing
	if r := m.lookup(p.PID); r != nil {
		<-r.done
	}
	if got, _ := next.Get(ctx, p.PID); *got.Reason != "host_restart" {
		t.Fatalf("a finished row was overwritten: %+v", got)
	}
}

// TestUsageAndHostAreStored: an execution's CPU time and peak memory, when
// the environment knows them, and the host that ran it reach its row.
func TestUsageAndHostAreStored(t *testing.T) {
	t.Parallel()
	m, ex, st := newManager(t)
	ctx := context.Background()
	for _, c := range []struct {
		res        module.Result
		cpu, bytes *int64
	}{
		{module.Result{Exit: module.ExitSuccess, CPUMs: 12, PeakMemoryBytes: 3456}, ptr(int64(12)), ptr(int64(3456))},
		{module.Result{Exit: module.ExitSuccess}, nil, nil}, // unknown: null, also after a run that knew them
	} {
		p, err := m.Create(ctx, CreateInput{Code: "x", Ref: "usage", Autorun: true})
		if err != nil {
			t.Fatal(err)
		}
		<-ex.start
		ex.end <- c.res
		got := waitIdle(t, m, p.PID)
		row, err := st.GetProcess(ctx, p.PID)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range []struct {
			what      string
			cpu, peak *int64
			host      string
		}{{"view", got.CPUMs, got.PeakMemoryBytes, got.HostID}, {"row", row.CPUMs, row.PeakMemoryBytes, row.HostID}} {
			if !equal(v.cpu, c.cpu) || !equal(v.peak, c.bytes) || v.host != "test-host" {
				t.Fatalf("%s: cpu %v peak %v host %q", v.what, v.cpu, v.peak, v.host)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

func equal(a, b *int64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

// TestLaunchAfterShutdownBegan: an execution launched once shutdown has
// begun (it was admitted just before) never starts and is stored as ended
// by the shutdown.
func TestLaunchAfterShutdownBegan(t *testing.T) {
	t.Parallel()
	m, _, st := newManager(t)
	p := &store.Process{Code: "x", State: string(Queued), TimeoutMs: 1000, CreatedAt: time.Now(), Runs: 1}
	insert(t, m, p)
	if err := m.admit(); err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	m.stopping = true
	m.mu.Unlock()
	m.launch(p, nil, nil)
	row, err := st.GetProcess(context.Background(), p.PID)
	if err != nil || row.State != "idle" || *row.ExitState != "canceled" || row.Reason != "host_shutdown" {
		t.Fatalf("stored %+v %v", row, err)
	}
	if err := m.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestLateLiveWritesNeverLandOnTheNextRun: a progress flush (the running
// transition) or a suspend/resume state write of run N that arrives once
// run N+1 of the same process started changes nothing of the new run's row.
func TestLateLiveWritesNeverLandOnTheNextRun(t *testing.T) {
	t.Parallel()
	m, ex, st := newManagerIn(t, t.TempDir(), time.Hour) // no flush of its own
	ctx := context.Background()
	p, err := m.Create(ctx, CreateInput{Code: "x", Autorun: true})
	if err != nil {
		t.Fatal(err)
	}
	<-ex.start
	first := m.lookup(p.PID)
	m.EmitStdout(p.PID, []byte("first\n"))
	flush, _ := first.progress() // taken at a tick, written late
	if flush == nil {
		t.Fatal("a running execution with output has nothing to flush")
	}
	ex.end <- module.Result{Exit: module.ExitSuccess}
	waitIdle(t, m, p.PID)
	if _, err := m.Run(ctx, p.PID, true); err != nil {
		t.Fatal(err)
	}
	<-ex.start
	if err := m.w.do(flush); err != nil {
		t.Fatal(err)
	}
	m.writeLiveState(first)
	row, err := st.GetProcess(ctx, p.PID)
	if err != nil {
		t.Fatal(err)
	}
	if row.Runs != 2 || row.State != string(Queued) || row.StartedAt != nil || row.Stdout != "" {
		t.Fatalf("run 1's late writes changed run 2's row: runs %d, %s, started %v, stdout %q", row.Runs, row.State, row.StartedAt, row.Stdout)
	}
	ex.end <- module.Result{Exit: module.ExitSuccess}
	waitIdle(t, m, p.PID)
}

// TestShutdownWaitsForACreateBetweenInsertAndLaunch: a shutdown that begins
// while a create has stored its row as queued but not launched it yet does
// not end before that row is final (canceled by the shutdown).
func TestShutdownWaitsForACreateBetweenInsertAndLaunch(t *testing.T) {
	t.Parallel()
	m, ex, st := newManager(t)
	m.beforeLaunch = func() {
		// Stop cannot end while this create holds its queued row: it
		// gives up at its deadline instead.
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if err := m.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("shutdown while a created process was not launched yet: %v", err)
		}
	}
	p, err := m.Create(context.Background(), CreateInput{Code: "x", Autorun: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	row, err := st.GetProcess(context.Background(), p.PID)
	if err != nil || row.State != "idle" || row.ExitState == nil || *row.ExitState != "canceled" || row.Reason != "host_shutdown" {
		t.Fatalf("stored %+v %v", row, err)
	}
	select {
	case pid := <-ex.start:
		t.Fatalf("process %d ran after shutdown", pid)
	default:
	}
}

// TestOutputFilePartsAreKeptWhole: a file arrives in parts; a part of no
// file sent before is dropped, and a file whose parts pass the cap is
// dropped whole, never kept cut.
func TestOutputFilePartsAreKeptWhole(t *testing.T) {
	t.Parallel()
	m, ex, _ := newManager(t)
	m.limits.OutputFileBytes = 1 << 20
	p, _ := m.Create(context.Background(), CreateInput{Code: "x", Autorun: true})
	<-ex.start
	m.EmitFile(p.PID, "a.txt", []byte("ab"), false)
	m.EmitFile(p.PID, "a.txt", []byte("cd"), true)
	m.EmitFile(p.PID, "b.txt", []byte("orphan"), true)
	m.EmitFile(p.PID, "c.bin", make([]byte, 1<<20-10), false)
	m.EmitFile(p.PID, "c.bin", make([]byte, 20), true) // past the cap
	m.EmitFile(p.PID, "c.bin", make([]byte, 1), true)  // the rest of a dropped file
	ex.end <- module.Result{Exit: module.ExitSuccess}
	got := waitIdle(t, m, p.PID)
	files, err := m.Files(context.Background(), p.PID)
	if err != nil || len(files) != 1 || files[0].Path != "a.txt" || files[0].Size != 4 || !got.OutputTruncated {
		t.Fatalf("files %+v (%v), truncated %v", files, err, got.OutputTruncated)
	}
	if b, err := readFile(m, p.PID, "a.txt"); err != nil || string(b) != "abcd" {
		t.Fatalf("a.txt: %q %v", b, err)
	}
	if !strings.Contains(got.Stderr, "c.bin") {
		t.Fatalf("stderr %q does not say c.bin was dropped", got.Stderr)
	}
}

func readFile(m *Manager, pid int64, path string) ([]byte, error) {
	size, r, err := m.File(context.Background(), pid, path)
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(r)
	if err == nil && int64(len(b)) != size {
		err = fmt.Errorf("read %d bytes of %d", len(b), size)
	}
	return b, err
}

// commits signals each commit of the writer's (a pending signal stands for
// any number of them).
type commits struct {
	noObserver
	c chan struct{}
}

func (c *commits) RowsWritten(int, time.Duration) {
	select {
	case c.c <- struct{}{}:
	default:
	}
}

// TestOutputFilesSpoolInSpoolDir: while a run lasts, the files it left are
// in one file in the spool directory the manager was given (the data
// directory's, on a server), which is gone once the run is stored.
func TestOutputFilesSpoolInSpoolDir(t *testing.T) {
	t.Parallel()
	m, ex, _ := newManager(t)
	m.spoolDir = t.TempDir()
	p, _ := m.Create(context.Background(), CreateInput{Code: "x", Autorun: true})
	<-ex.start
	m.EmitFile(p.PID, "a.txt", []byte("spooled"), false)
	if spooled, _ := filepath.Glob(filepath.Join(m.spoolDir, "cyrnel-process-files-*")); len(spooled) != 1 {
		t.Fatalf("spooled in %s: %v", m.spoolDir, spooled)
	}
	ex.end <- module.Result{Exit: module.ExitSuccess}
	waitIdle(t, m, p.PID)
	if b, err := readFile(m, p.PID, "a.txt"); err != nil || string(b) != "spooled" {
		t.Fatalf("a.txt: %q %v", b, err)
	}
	if left, _ := os.ReadDir(m.spoolDir); len(left) != 0 {
		t.Fatalf("left in the spool directory: %v", left)
	}
}
