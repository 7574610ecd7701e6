package worker

import (
	"context"
	"encoding/json"
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

// Call sends a request to the session's runtime between executions (its
// file requests) and decodes the answer into out. The runtime is untrusted:
// the caller bounds ctx and checks what comes back.
func (s *Session) Call(ctx context.Context, method string, params, out any) error {
	var boxed json.RawMessage
	if err := s.conn.Call(ctx, method, params, &boxed); err != nil {
		return err
	}
	raw, err := unbox(boxed)
	if err != nil {
		return err
	}
	return json.Unmarshal(raw, out)
}

var _ module.Session = (*Session)(nil)
