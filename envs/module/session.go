package module

import (
	"context"
	"time"
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
	// (when false the interpreter is spent and must be closed). As
	// Environment.Execute, it returns after the execution's calls on the
	// bindings have.
	Execute(ctx context.Context, in ExecutionInput) (res Result, clean bool)
	// The files of the session's workspace, between executions.
	SessionFiles
	// Done is closed when the interpreter has ended.
	Done() <-chan struct{}
	// Close kills the interpreter and waits for it.
	Close()
}

// SessionFiles are the files of a session's workspace (the runtime's
// working directory), reached between its executions. The runtime is
// untrusted: the caller validates paths, bounds ctx and checks what comes
// back (sizes, names). A request the runtime refuses fails with a
// *FileError.
type SessionFiles interface {
	// WriteFile writes data to path, replacing what was there.
	WriteFile(ctx context.Context, path string, data []byte) error
	// ReadFile reads at most limit bytes of path from offset.
	ReadFile(ctx context.Context, path string, offset int64, limit int) (FileChunk, error)
	// DeleteFile removes path.
	DeleteFile(ctx context.Context, path string) error
	// ListFiles lists at most limit files of the workspace.
	ListFiles(ctx context.Context, limit int) ([]FileInfo, error)
}

// FileChunk is part of a workspace file.
type FileChunk struct {
	Data []byte
	// Size and ModifiedAt are the whole file's when the part was read.
	Size       int64
	ModifiedAt time.Time
}

// FileInfo is one file of a workspace.
type FileInfo struct {
	Path       string
	Size       int64
	ModifiedAt time.Time
}

// FileError is the runtime's refusal of a file request.
type FileError struct {
	// NotFound: no such file; else the request was invalid (a path
	// outside the workspace, a directory).
	NotFound bool
	Message  string // the runtime's words: shown, never trusted
}

func (e *FileError) Error() string { return e.Message }

// WorkerCounts are an environment's workers by state, and how often its
// template was started again (the host's metrics).
type WorkerCounts struct {
	Ready, Starting, Busy int
	TemplateRestarts      int64
}
