package worker

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// idleWorker starts a real worker process that announces itself and waits.
func idleWorker(t *testing.T, ctx context.Context) (*Worker, error) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is required: %v", err)
	}
	real, err := exec.Command(python, "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		return nil, err
	}
	w, err := Start(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), Plain{}, Command{
		Path: strings.TrimSpace(string(real)),
		Args: []string{"-I", "-S", "-c", "import os, time\nos.write(4, b'{\"jsonrpc\":\"2.0\",\"method\":\"ready\",\"params\":{}}\\n')\ntime.sleep(60)"},
	})
	if err != nil {
		return nil, err
	}
	return w, w.WaitReady(ctx)
}

// TestReturnWhileASpawnIsInFlight: a lent worker handed back while a spawn
// is in flight must not leave that spawn with nowhere to land (it blocked,
// holding the pool, and wedged Close: every environment teardown).
func TestReturnWhileASpawnIsInFlight(t *testing.T) {
	gate := make(chan struct{})
	held := make(chan struct{}, 8)   // a spawn for the waiter is in flight
	landed := make(chan struct{}, 8) // a spawn has landed
	var spawns atomic.Int32
	p := NewPool(slog.New(slog.NewTextHandler(io.Discard, nil)), PoolConfig{Size: 1, StartTimeout: 30 * time.Second, Lend: true},
		func(ctx context.Context) (*Worker, error) {
			if spawns.Add(1) > 1 {
				held <- struct{}{}
				<-gate // the spawn for a waiter: held until the worker is back
			}
			return idleWorker(t, ctx)
		})
	p.landed = func() { landed <- struct{}{} }
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	w, err := p.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// A second caller waits, so the pool spawns for it; it then gives up.
	ctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error)
	go func() { _, err := p.Get(ctx); gaveUp <- err }()
	receive(t, held, "no spawn started for the waiter")
	cancel()
	if err := <-gaveUp; err == nil {
		t.Fatal("the waiter got a worker while the only one was lent and the spawn held")
	}
	if !p.Return(w, true) {
		t.Fatal("Return refused a live worker with a warm slot free")
	}
	close(gate) // the spawn lands on a full set of warm slots
	receive(t, landed, "the first spawn never landed")
	receive(t, landed, "the held spawn never landed")
	if s := p.Stats(); s.Spawning != 0 || s.Ready != 2 || s.Started != 2 {
		t.Fatalf("after the held spawn landed: %+v, want 2 ready", s)
	}
	closed := make(chan struct{})
	go func() { p.Stop(context.Background()); close(closed) }()
	receive(t, closed, "Stop wedged")
}

// receive waits for a signal, failing (instead of hanging the suite) if it
// never comes.
func receive(t *testing.T, ch <-chan struct{}, never string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal(never)
	}
}

// TestSpawnsNeeded: lent workers hold their slots, so reusing a worker
// never spawns its replacement (it did, every 20 ms under steady load, and
// the returning worker was then thrown away); waiters still get spawns.
func TestSpawnsNeeded(t *testing.T) {
	for _, c := range []struct {
		name                                      string
		size, lent, waiting, ready, spawning, max int
		want                                      int
	}{
		{"full", 2, 0, 0, 2, 0, 4, 0},
		{"one taken for good", 2, 0, 0, 1, 0, 4, 1},
		{"one lent", 2, 1, 0, 1, 0, 4, 0},
		{"all lent", 2, 2, 0, 0, 0, 4, 0},
		{"all lent, one waits", 2, 2, 1, 0, 0, 4, 1},
		{"more lent than slots, one waits", 2, 3, 1, 0, 0, 4, 1},
		{"a spawn already covers it", 2, 1, 0, 0, 1, 4, 0},
		{"capped by parallel spawns", 8, 0, 0, 0, 0, 4, 4},
	} {
		if got := spawnsNeeded(c.size, c.lent, c.waiting, c.ready, c.spawning, c.max); got != c.want {
			t.Errorf("%s: %d spawns, want %d", c.name, got, c.want)
		}
	}
}

// TestLendingPoolKeepsWhatItGrew: a lending pool that grew beyond Size to
// serve concurrent callers keeps the workers they return, up to Keep, and
// hands them out again without spawning. (It kept only Size and discarded
// the rest, so every burst above Size spawned and threw away workers: the
// TypeScript pool under 8 clients.)
func TestLendingPoolKeepsWhatItGrew(t *testing.T) {
	t.Parallel()
	var spawns atomic.Int32
	p := NewPool(slog.New(slog.NewTextHandler(io.Discard, nil)), PoolConfig{Size: 1, Keep: 3, StartTimeout: 30 * time.Second, Lend: true},
		func(ctx context.Context) (*Worker, error) {
			spawns.Add(1)
			return idleWorker(t, ctx)
		})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Stop(context.Background())
	var lent []*Worker
	for range 3 {
		w, err := p.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		lent = append(lent, w)
	}
	for i, w := range lent {
		if !p.Return(w, true) {
			t.Fatalf("worker %d of 3 returned but not kept (Keep 3)", i+1)
		}
	}
	before := spawns.Load()
	for range 3 {
		w, err := p.Get(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Return(w, true)
	}
	if n := spawns.Load() - before; n != 0 {
		t.Errorf("%d spawns to serve 3 callers with 3 workers kept", n)
	}
}

// TestLoneClientKeepsOneWorker: a lending pool hands out the worker
// returned last, so one client served back to back keeps one warm worker
// (it alternated between all of them, each switch waking a colder one),
// while spawned workers are still handed out oldest first.
func TestLoneClientKeepsOneWorker(t *testing.T) {
	t.Parallel()
	landed := make(chan struct{}, 8)
	p := NewPool(slog.New(slog.NewTextHandler(io.Discard, nil)), PoolConfig{Size: 3, StartTimeout: 30 * time.Second, Lend: true},
		func(ctx context.Context) (*Worker, error) { return idleWorker(t, ctx) })
	p.landed = func() { landed <- struct{}{} }
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(context.Background()) })
	for range 3 {
		receive(t, landed, "a spawn never landed")
	}
	if s := p.Stats(); s.Ready != 3 {
		t.Fatalf("%+v, want 3 ready", s)
	}
	p.mu.Lock()
	order := slices.Clone(p.ready) // the oldest spawn last
	p.mu.Unlock()
	first, err := p.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if first != order[len(order)-1] {
		t.Fatal("the first Get did not hand out the oldest spawn")
	}
	for i := range 5 {
		if !p.Return(first, true) {
			t.Fatal("Return refused a live worker")
		}
		w, err := p.Get(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if w != first {
			t.Fatalf("Get %d handed out another worker than the one just returned", i+2)
		}
	}
	// Control: with that worker lent, the others are still handed out.
	other, err := p.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if other == first || other != order[len(order)-2] {
		t.Fatal("a second client did not get the next oldest spawn")
	}
	p.Return(other, true)
	p.Return(first, true)
}
