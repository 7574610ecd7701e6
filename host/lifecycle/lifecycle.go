// Package lifecycle holds the composition root's running components: each
// is started in order onto a stack, and the stack is unwound in reverse,
// on a failed start and on shutdown alike.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// Component is a long-lived part of the host.
type Component interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Func adapts a pair of functions to Component (either may be nil).
type Func struct {
	OnStart func(ctx context.Context) error
	OnStop  func(ctx context.Context) error
}

// Start runs OnStart, if set.
func (f Func) Start(ctx context.Context) error {
	if f.OnStart == nil {
		return nil
	}
	return f.OnStart(ctx)
}

// Stop runs OnStop, if set.
func (f Func) Stop(ctx context.Context) error {
	if f.OnStop == nil {
		return nil
	}
	return f.OnStop(ctx)
}

// Closer adapts a component that stops with a plain Close.
func Closer(close func()) Component {
	return Func{OnStop: func(context.Context) error { close(); return nil }}
}

type entry struct {
	name string
	c    Component
}

// Stack is the started components, newest last.
type Stack struct {
	log *slog.Logger
	// before, when set, runs before each start and fails it by returning
	// an error (tests inject a failure at each step with it).
	before func(name string) error

	mu      sync.Mutex
	started []entry
}

// New returns an empty stack; before may be nil.
func New(log *slog.Logger, before func(name string) error) *Stack {
	return &Stack{log: log, before: before}
}

// Start starts c and, when it started, pushes it so Stop stops it. A
// component that fails to start cleans up after itself; the caller unwinds
// the rest with Stop.
func (s *Stack) Start(ctx context.Context, name string, c Component) error {
	if s.before != nil {
		if err := s.before(name); err != nil {
			return fmt.Errorf("start %s: %w", name, err)
		}
	}
	if err := c.Start(ctx); err != nil {
		return fmt.Errorf("start %s: %w", name, err)
	}
	s.mu.Lock()
	s.started = append(s.started, entry{name, c})
	s.mu.Unlock()
	return nil
}

// Stop stops every started component, newest first, each even when an
// earlier one failed; it returns their errors joined. A second Stop finds
// the stack empty.
func (s *Stack) Stop(ctx context.Context) error {
	s.mu.Lock()
	started := s.started
	s.started = nil
	s.mu.Unlock()
	var errs []error
	for i := len(started) - 1; i >= 0; i-- {
		e := started[i]
		if err := e.c.Stop(ctx); err != nil {
			s.log.Warn("stop", "component", e.name, "err", err)
			errs = append(errs, fmt.Errorf("stop %s: %w", e.name, err))
		}
	}
	return errors.Join(errs...)
}
