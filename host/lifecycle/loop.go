package lifecycle

import (
	"context"
	"errors"
	"sync"
)

// ErrStopped is returned by a Start after Stop: a component runs once.
var ErrStopped = errors.New("started after it was stopped")

// Loop is the goroutine a component runs between its Start and its Stop
// (river's start/stop shape): the constructor starts nothing, Start starts
// the goroutine, Stop ends its context and returns once it has returned.
// A second Start while it runs does nothing; Start after Stop returns
// ErrStopped; Stop before Start, or a second Stop, waits for whatever ran.
type Loop struct {
	mu      sync.Mutex
	stopped bool
	cancel  context.CancelFunc
	done    chan struct{} // nil: never started
}

// Start runs run in a goroutine of its own. run's context carries ctx's
// values but not its end: the loop runs until Stop, however the caller's
// start-up context ends, so components stop in the stack's order.
func (l *Loop) Start(ctx context.Context, run func(ctx context.Context)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped {
		return ErrStopped
	}
	if l.done != nil {
		return nil
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	l.cancel, l.done = cancel, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		run(rctx)
	}(l.done)
	return nil
}

// Stop ends run's context and waits until run returned, or until ctx ends
// (then it returns ctx's error and the loop finishes on its own).
func (l *Loop) Stop(ctx context.Context) error {
	l.mu.Lock()
	l.stopped = true
	done := l.done
	if l.cancel != nil {
		l.cancel()
	}
	l.mu.Unlock()
	if done == nil {
		return nil
	}
	return Await(ctx, done)
}

// Await waits until done is closed, or until ctx ends (then it returns
// ctx's error): how a Stop waits for what it ended.
func Await(ctx context.Context, done <-chan struct{}) error {
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
