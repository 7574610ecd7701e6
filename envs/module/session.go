package module

import "context"

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

// DisplaySink is optional for Bindings: it receives the displays of an
// execution; bindings without it drop them.
type DisplaySink interface {
	EmitDisplay(eid int64, d Display)
}

// FileSink is optional for Bindings: it receives the files a one-shot
// program left in its workspace; bindings without it drop them. The runtime
// is untrusted: the sink caps what it keeps.
type FileSink interface {
	// EmitFile passes a file, or with appended the next part of the file
	// passed last (a file travels in parts, each within a message's limit).
	EmitFile(eid int64, path string, data []byte, appended bool)
}

// Session is one interpreter that serves many executions, one at a time,
// keeping the runtime's state between them. Its owner (one goroutine of
// the host) runs executions in it and closes it.
type Session interface {
	// Execute runs one program; clean says the runtime may serve again
	// (when false the interpreter is spent and must be closed).
	Execute(ctx context.Context, in ExecutionInput) (res Result, clean bool)
	// Call sends a request to the runtime between executions (its file
	// requests: writeFile, readFile, deleteFile, listFiles) and decodes the
	// answer into out. The runtime is untrusted: the caller bounds ctx and
	// checks what comes back.
	Call(ctx context.Context, method string, params, out any) error
	// Done is closed when the interpreter has ended.
	Done() <-chan struct{}
	// Close kills the interpreter and waits for it.
	Close()
}

// WorkerCounts are an environment's workers by state, and how often its
// template was started again (the host's metrics).
type WorkerCounts struct {
	Ready, Starting, Busy int
	TemplateRestarts      int64
}
