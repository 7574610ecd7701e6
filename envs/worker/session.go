package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
)

// Display is one rich display a runtime recorded: a MIME bundle (text, or
// base64 for binary types) shown by the program or its final expression.
type Display struct {
	Kind string            `json:"kind"`
	Data map[string]string `json:"data"`
}

// The kinds of a Display.
const (
	DisplayShown  = "display" // cyrnel.display(obj), or a figure left open
	DisplayResult = "result"  // the value of the program's final expression
)

// DisplaySink receives the displays of an execution; bindings without it
// drop them.
type DisplaySink interface {
	EmitDisplay(eid int64, d Display)
}

// FileSink receives the files a one-shot program left in its workspace;
// bindings without it drop them. The runtime is untrusted: the sink caps
// what it keeps.
type FileSink interface {
	// EmitFile passes a file, or with appended the next part of the file
	// passed last (a file travels in parts, each within a message's limit).
	EmitFile(eid int64, path string, data []byte, appended bool)
}

// Session is one worker that serves many executions, one at a time, keeping
// the runtime's state between them (a session's interpreter). Its owner
// runs executions in it and closes it.
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
