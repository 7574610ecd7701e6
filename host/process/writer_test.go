package process

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/pgtest"
	"github.com/cyrnel/cyrnel/host/store"
)

// fullStore is a migrated SQLite store that holds no more than 60 pages:
// SQLite's own limit on the file's pages, past which a write fails as on a
// full disk (SQLITE_FULL).
func fullStore(t *testing.T) *store.Store {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	st, err := store.Open(ctx, "", dir) // migrated at full size
	if err != nil {
		t.Fatal(err)
	}
	// Room for a few dozen pages past the schema, whatever the migrations
	// made of it.
	var pages int
	if err := st.DB.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st, err = store.Open(ctx, fmt.Sprintf("sqlite://%s?_pragma=max_page_count(%d)", filepath.Join(dir, "cyrnel.db"), pages+20), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// holdWriter keeps m's writer busy with a write of its own, so what follows
// queues up; release(n) waits until n writes are queued, then lets it go.
func holdWriter(m *Manager) (release func(n int)) {
	hold, done := make(chan struct{}), make(chan struct{})
	go m.w.do(func(context.Context, *store.Tx) error { close(hold); <-done; return nil })
	<-hold
	return func(n int) {
		for len(m.w.queue) < n {
			runtime.Gosched()
		}
		close(done)
	}
}

// TestAFullDiskIsAnsweredAsStored: when the database cannot grow, a create
// fails saying so and leaves nothing behind (nothing runs, nothing looks
// queued), a result too large to store is stored as the failure it is
// answered as, and deleting processes frees room again.
func TestAFullDiskIsAnsweredAsStored(t *testing.T) {
	t.Parallel()
	st := fullStore(t)
	m, ex := newManagerOn(t, st, 0)
	ctx := context.Background()
	code := strings.Repeat("x", 40<<10)
	var pids []int64
	for {
		p, err := m.Create(ctx, CreateInput{Code: code})
		if errors.Is(err, store.ErrFull) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, p.PID)
		if len(pids) > 100 {
			t.Fatal("the database never filled")
		}
	}
	if _, err := m.Create(ctx, CreateInput{Code: code, Autorun: true, Wait: time.Minute}); !errors.Is(err, store.ErrFull) {
		t.Fatalf("create on a full disk: %v", err)
	}
	select {
	case pid := <-ex.start:
		t.Fatalf("process %d ran although it could not be stored", pid)
	default:
	}
	rows, err := st.ListProcesses(ctx, store.ProcessFilter{Limit: 1000})
	if err != nil || len(rows) != len(pids) {
		t.Fatalf("stored %d rows, %d answered: %v", len(rows), len(pids), err)
	}

	// A small process fits; its result, too large for the disk, is stored
	// as the failure the waiter is answered with.
	var p *Process
	for _, pid := range pids[:2] {
		if err := m.Delete(ctx, pid); err != nil {
			t.Fatalf("delete on a full disk: %v", err)
		}
	}
	p, err = m.Create(ctx, CreateInput{Code: "x", Autorun: true})
	if err != nil {
		t.Fatal(err)
	}
	<-ex.start
	m.EmitStdout(p.PID, []byte(strings.Repeat("y", 900<<10)))
	ex.end <- module.Result{Exit: module.ExitSuccess}
	answered := waitIdle(t, m, p.PID)
	row, err := st.GetProcess(ctx, p.PID)
	if err != nil {
		t.Fatal(err)
	}
	if *answered.Reason != "environment_error" || !strings.Contains(answered.Error, "disk is full") ||
		row.State != "idle" || row.Reason != *answered.Reason || row.Error != answered.Error || answered.Stdout != row.Stdout {
		t.Fatalf("answered %s %q, stored %s %s %q", *answered.Reason, answered.Error, row.State, row.Reason, row.Error)
	}
}

// TestOneFailingWriteLeavesItsBatch: of writes queued together (one
// transaction), one that fails fails alone.
func TestOneFailingWriteLeavesItsBatch(t *testing.T) {
	t.Parallel()
	m, _, st := newManager(t)
	ctx := context.Background()
	release := holdWriter(m)
	boom := errors.New("boom")
	errs := make(chan error, 10)
	for i := range 10 {
		go func() {
			errs <- m.w.do(func(ctx context.Context, tx *store.Tx) error {
				if i == 3 {
					return boom
				}
				return tx.InsertProcess(ctx, &store.Process{Code: "x", State: "idle", CreatedAt: time.Now()})
			})
		}()
	}
	release(10)
	var failed int
	for range 10 {
		if err := <-errs; errors.Is(err, boom) {
			failed++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	rows, err := st.ListProcesses(ctx, store.ProcessFilter{Limit: 100})
	if failed != 1 || err != nil || len(rows) != 9 {
		t.Fatalf("%d failed, %d stored: %v", failed, len(rows), err)
	}
}

// TestAFullDiskInABatchFailsOnlyItsWrite: on SQLite a batch's statements
// run without a statement journal (OR FAIL), so a full disk rolls back the
// whole transaction; the writes are then tried alone and only the one that
// does not fit fails.
func TestAFullDiskInABatchFailsOnlyItsWrite(t *testing.T) {
	t.Parallel()
	st := fullStore(t)
	m, _ := newManagerOn(t, st, 0)
	release := holdWriter(m)
	errs := make(chan error, 6)
	for i := range 6 {
		code := "x"
		if i == 2 {
			code = strings.Repeat("x", 1<<20) // more than the 60 pages
		}
		go func() {
			errs <- m.w.do(func(ctx context.Context, tx *store.Tx) error {
				return tx.InsertProcess(ctx, &store.Process{Code: code, State: "idle", CreatedAt: time.Now()})
			})
		}()
	}
	release(6)
	var full int
	for range 6 {
		if err := <-errs; errors.Is(err, store.ErrFull) {
			full++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	rows, err := st.ListProcesses(context.Background(), store.ProcessFilter{Limit: 100})
	if full != 1 || err != nil || len(rows) != 5 {
		t.Fatalf("%d full, %d stored: %v", full, len(rows), err)
	}
}

// TestAResultOutlivesADatabaseOutage: a result that ends while the database
// cannot be reached is kept and stored once it is back, and the waiter is
// answered with what is stored. Before, the waiter was told
// failed/environment_error and the row stayed running.
func TestAResultOutlivesADatabaseOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	outage, url := pgtest.NewOutage(t, pgtest.Schema(t, pgtest.URL(t)))
	st, err := store.Open(ctx, url, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, ex := newManagerOn(t, st, 0)
	p, err := m.Create(ctx, CreateInput{Code: "x", Autorun: true})
	if err != nil {
		t.Fatal(err)
	}
	<-ex.start
	m.EmitStdout(p.PID, []byte("kept\n"))
	outage.Cut()
	ex.end <- module.Result{Exit: module.ExitSuccess}
	waited := make(chan *Process, 1)
	go func() {
		p, _ := m.Wait(ctx, p.PID, time.Minute)
		waited <- p
	}()
	// While the database is away the result is held, not answered.
	select {
	case got := <-waited:
		t.Fatalf("answered while the result could not be stored: %+v", got)
	case <-time.After(4 * durableFirstPause):
	}
	outage.Restore()
	got := <-waited
	if got.State != Idle || *got.ExitState != string(module.ExitSuccess) || got.Stdout != "kept\n" {
		t.Fatalf("answered %+v (error %q)", got, got.Error)
	}
	stored, err := st.GetProcess(ctx, p.PID)
	if err != nil {
		t.Fatal(err)
	}
	if stored.State != string(Idle) || *stored.ExitState != string(module.ExitSuccess) || stored.Stdout != "kept\n" {
		t.Fatalf("stored %+v, answered %+v", stored, got)
	}
}
