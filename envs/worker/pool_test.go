package worker

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// idleWorker starts a real worker process that announces itself and waits.
func idleWorker(t *testing.T, ctx context.Context) (*Worker, error) {
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
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

// TestPutWhileARefillIsInFlight: a reused worker handed back while the
// refill of its slot is spawning must not leave that spawn with nowhere to
// land (it blocked, holding the pool, and wedged Close: every environment
// teardown).
func TestPutWhileARefillIsInFlight(t *testing.T) {
	gate := make(chan struct{})
	var spawns atomic.Int32
	p := NewPool(slog.New(slog.NewTextHandler(io.Discard, nil)), 1, 30*time.Second, func(ctx context.Context) (*Worker, error) {
		if spawns.Add(1) > 1 {
			<-gate // the refill: held until the worker is back
		}
		return idleWorker(t, ctx)
	})
	w, err := p.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for p.Stats().Spawning == 0 { // the refill has started
		if time.Now().After(deadline) {
			t.Fatal("no refill started")
		}
		time.Sleep(time.Millisecond)
	}
	if !p.Put(w) {
		t.Fatal("Put refused a worker with a warm slot free")
	}
	close(gate) // the refill lands on a full set of warm slots
	for p.Stats().Spawning > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the refill never landed")
		}
		time.Sleep(time.Millisecond)
	}
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close wedged")
	}
}
