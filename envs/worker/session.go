package worker

import (
	"context"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
)

// Session is one worker that serves many executions, one at a time, keeping
// the runtime's state between them (a session's interpreter): the
// module.Session of worker-based environments.
type Session struct {
	*Worker
	b     module.Bindings
	stubs ToolStubs
	grace time.Duration
}

// NewSession wraps a started, ready worker whose runtime keeps state; a
// kill or timeout asks it to stop the program and waits grace for that.
func NewSession(w *Worker, b module.Bindings, stubs ToolStubs, grace time.Duration) *Session {
	return &Session{Worker: w, b: b, stubs: stubs, grace: grace}
}

// Execute runs one program; clean says the runtime may serve again (when
// false the worker is spent and must be closed).
func (s *Session) Execute(ctx context.Context, in module.ExecutionInput) (module.Result, bool) {
	return s.Run(ctx, s.b, Request{Input: in, OutputLimit: in.Options.OutputLimitBytes, Reuse: true, Grace: s.grace, Stubs: s.stubs})
}

var _ module.Session = (*Session)(nil)
