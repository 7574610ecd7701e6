package lifecycle_test

import (
	"context"
	"errors"
	"testing"

	"github.com/cyrnel/cyrnel/host/lifecycle"
)

// TestLoopStopWaitsForTheGoroutine: Stop returns only once run returned;
// a Stop whose context ends first says so and the loop still finishes.
func TestLoopStopWaitsForTheGoroutine(t *testing.T) {
	t.Parallel()
	var l lifecycle.Loop
	release, ended := make(chan struct{}), make(chan struct{})
	started := make(chan struct{})
	if err := l.Start(context.Background(), func(ctx context.Context) {
		defer close(ended)
		close(started)
		<-ctx.Done()
		<-release
	}); err != nil {
		t.Fatal(err)
	}
	<-started
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if err := l.Stop(gone); !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop with run still going = %v, want the context's error", err)
	}
	close(release)
	if err := l.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	default:
		t.Fatal("Stop returned before run did")
	}
}

// TestLoopStartStop: the start-up context's end does not stop the loop;
// a second Start is a no-op, Start after Stop is refused, a second Stop
// and a Stop before Start do nothing.
func TestLoopStartStop(t *testing.T) {
	t.Parallel()
	var l lifecycle.Loop
	runs := make(chan context.Context, 2)
	run := func(ctx context.Context) { runs <- ctx; <-ctx.Done() }
	startCtx, cancel := context.WithCancel(context.Background())
	if err := l.Start(startCtx, run); err != nil {
		t.Fatal(err)
	}
	if err := l.Start(startCtx, run); err != nil {
		t.Fatalf("second Start = %v", err)
	}
	cancel() // cancels every context derived from it before returning
	if err := (<-runs).Err(); err != nil {
		t.Fatalf("the start-up context's end reached the loop: %v", err)
	}
	if err := l.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 0 {
		t.Fatal("a second Start ran the loop again")
	}
	if err := l.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop = %v", err)
	}
	if err := l.Start(context.Background(), run); !errors.Is(err, lifecycle.ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
	var never lifecycle.Loop
	if err := never.Stop(context.Background()); err != nil {
		t.Fatalf("Stop before Start = %v", err)
	}
	if err := never.Start(context.Background(), run); !errors.Is(err, lifecycle.ErrStopped) {
		t.Fatalf("Start after an early Stop = %v, want ErrStopped", err)
	}
}
