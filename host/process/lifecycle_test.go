package process

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/lifecycle"
	"github.com/cyrnel/cyrnel/host/store"
)

// TestStopEndsItsGoroutines: New starts nothing; Stop, with an execution
// running, leaves no goroutine of the manager's (writer, flusher, pruner, run)
// once its result is stored; a second Stop does nothing and Start after
// Stop is refused. Not parallel: it counts the process's goroutines.
func TestStopEndsItsGoroutines(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	before := goleak.IgnoreCurrent()
	ex := &scripted{start: make(chan int64, 1), end: make(chan module.Result, 1), kills: make(chan int64, 1)}
	m := New(slog.New(slog.NewTextHandler(io.Discard, nil)), st, ex, DefaultLimits(), "test-host", time.Millisecond, With{})
	ex.m = m
	if err := goleak.Find(before); err != nil {
		t.Fatalf("New started goroutines: %v", err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := m.Create(ctx, CreateInput{Code: "x", Autorun: true})
	if err != nil {
		t.Fatal(err)
	}
	<-ex.start
	// The environment answers the kill Stop's cancellation stands for.
	ex.end <- module.Result{Exit: module.ExitCanceled, Reason: module.ReasonHostShutdown}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := goleak.Find(before); err != nil {
		t.Errorf("goroutines left after Stop: %v", err)
	}
	row, err := st.GetProcess(ctx, p.PID)
	if err != nil || row.State != string(Idle) {
		t.Fatalf("the execution's row after Stop: %+v %v", row, err)
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatalf("second Stop = %v", err)
	}
	if err := m.Start(ctx); !errors.Is(err, lifecycle.ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
}
