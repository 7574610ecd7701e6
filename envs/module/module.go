// Package module is the Go form of the cyrnel module contract: what an
// environment module implements, the bindings the host hands it, and the
// vocabulary (execution states, exit states) both sides share. It imports only
// the standard library so that environments never depend on the host.
package module

import (
	"context"
	"encoding/json"
)

// Info describes a module: environments and adapters alike.
type Info struct {
	ID          string
	Type        Type
	Name        string
	Version     string
	Description string
	// ConfigSchema and SecretsSchema are JSON Schema documents.
	ConfigSchema  json.RawMessage
	SecretsSchema json.RawMessage
}

// Type says which role a module plays.
type Type string

const (
	TypeEnvironment Type = "environment"
	TypeAdapter     Type = "adapter"
)

// Types are every module type, in the order the API's spec lists them.
var Types = []Type{TypeEnvironment, TypeAdapter}

// ExecState is what an environment may report through Bindings.SetState.
// The host adds idle and terminating on top; environments never report them.
type ExecState string

const (
	StateQueued  ExecState = "queued"
	StateRunning ExecState = "running"
)

// ExitState is how an execution ended.
type ExitState string

const (
	ExitSuccess  ExitState = "success"
	ExitFailed   ExitState = "failed"
	ExitTimeout  ExitState = "timeout"
	ExitCanceled ExitState = "canceled"
)

// ExitStates are every exit state, in the order the API's spec lists them.
var ExitStates = []ExitState{ExitSuccess, ExitFailed, ExitTimeout, ExitCanceled}

// Valid reports whether s is one of the four exit states.
func (s ExitState) Valid() bool {
	switch s {
	case ExitSuccess, ExitFailed, ExitTimeout, ExitCanceled:
		return true
	}
	return false
}

// Reason says precisely why an execution ended. Environments report it with
// Result; the host adds its own (host_restart, host_shutdown).
type Reason string

const (
	ReasonCompleted        Reason = "completed"
	ReasonException        Reason = "exception"
	ReasonTimeout          Reason = "timeout"
	ReasonKilled           Reason = "killed"
	ReasonMemoryLimit      Reason = "memory_limit"
	ReasonOutputLimit      Reason = "output_limit"
	ReasonCPULimit         Reason = "cpu_limit"
	ReasonEnvironmentError Reason = "environment_error"
	ReasonHostRestart      Reason = "host_restart"
	ReasonHostShutdown     Reason = "host_shutdown"
	// ReasonHostLost: the host that ran it stopped renewing its lease and
	// another host finished it.
	ReasonHostLost Reason = "host_lost"
	// ReasonSessionEnded: its session ended under it.
	ReasonSessionEnded Reason = "session_ended"
)

// Reasons are every reason, in the order the API's spec lists them.
var Reasons = []Reason{
	ReasonCompleted, ReasonException, ReasonTimeout, ReasonKilled, ReasonMemoryLimit, ReasonCPULimit,
	ReasonOutputLimit, ReasonEnvironmentError, ReasonHostRestart, ReasonHostShutdown, ReasonHostLost, ReasonSessionEnded,
}

// DefaultTimeoutMs is the host's default execution timeout.
const DefaultTimeoutMs = 30000

// Options are the host-resolved execution options.
type Options struct {
	TimeoutMs int64
	// OutputLimitBytes caps each of stdout and stderr; past it the
	// environment ends the execution with reason output_limit (0: no cap).
	OutputLimitBytes int64
}

// ExecutionInput is what the host hands to Environment.Execute.
type ExecutionInput struct {
	// EID is the process pid; it must be passed back to every binding.
	EID     int64
	Code    string
	Options Options
	// EnvConfig is per-execution configuration for the environment, as sent
	// by the client; environments ignore keys they do not know.
	EnvConfig map[string]any
	// Files are placed in the program's workspace (its working directory)
	// before it runs; paths are relative and validated by the host.
	Files []File
}

// File is a file in a program's workspace.
type File struct {
	Path    string
	Content []byte
}

// Result is what Execute returns: the exit state and, beyond the seed
// contract, the precise reason (the host derives one when it is empty).
type Result struct {
	Exit   ExitState
	Reason Reason
	// CPUMs and PeakMemoryBytes are what the execution's whole process tree
	// used, measured by the environment from its own accounting (the
	// cgroup's counters), never from what the program says; 0 when unknown.
	CPUMs           int64
	PeakMemoryBytes int64
}

// SetupContext is passed to Environment.Setup on activation.
type SetupContext struct {
	Config   map[string]any
	Secrets  map[string]any
	Bindings Bindings
}

// ToolDocsInput describes the tool an environment documents.
type ToolDocsInput struct {
	ServiceID    string
	ToolID       string
	Description  string
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
}

// Environment runs process code.
type Environment interface {
	Info() Info
	Setup(ctx context.Context, sc SetupContext) error
	// Execute runs one process and returns how it ended. Returning an error
	// counts as failed with the error's message. It returns only after
	// every call it made on the bindings for this execution has returned
	// (calls still under way when the program ends are cancelled first), so
	// what the host records of a call comes before the execution's end.
	Execute(ctx context.Context, in ExecutionInput) (Result, error)
	// Kill stops a queued or running execution; its Execute returns canceled
	// shortly after. An unknown eid is not an error.
	Kill(ctx context.Context, eid int64) error
	Docs(ctx context.Context) (string, error)
	ToolDocs(ctx context.Context, in ToolDocsInput) (string, error)
	Teardown(ctx context.Context) error
}

// Status is optional: an environment that implements it reports its health
// (pool, sandbox layers) for GET /environment.
type Status interface {
	Status() map[string]any
}

// InvokeInput is the payload of every tool call.
type InvokeInput struct {
	// EID is the execution that makes the call, set by the environment
	// (never taken from the runtime's message); 0 for calls from outside.
	EID        int64          `json:"-"`
	ServiceID  string         `json:"serviceId"`
	ToolID     string         `json:"toolId"`
	Parameters map[string]any `json:"parameters"`
}

// Tool is what ListTools returns: enough to build a callable stub and its
// documentation inside a runtime.
type Tool struct {
	ServiceID   string          `json:"serviceId"`
	ToolID      string          `json:"toolId"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"inputSchema"`
}

// ServiceTools is optional for Bindings: the tools of one service, so a
// runtime that builds stubs per service need not fetch every schema.
type ServiceTools interface {
	ListServiceTools(ctx context.Context, serviceID string) ([]Tool, error)
}

// ToolDocsSource is optional for Bindings: one tool with everything its
// documentation shows (ListTools leaves out output schemas, which reach
// megabytes for large APIs), for a runtime that renders docs on demand.
type ToolDocsSource interface {
	ToolDocsInput(ctx context.Context, serviceID, toolID string) (ToolDocsInput, error)
}

// ToolMatch is a tool a search found, with its relevance (higher is
// better, comparable within one search).
type ToolMatch struct {
	ServiceID   string  `json:"serviceId"`
	ToolID      string  `json:"toolId"`
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Score       float64 `json:"score"`
}

// ToolSearch is optional for Bindings: tools ranked by relevance to a
// natural-language query, for programs that look for a tool.
type ToolSearch interface {
	SearchTools(ctx context.Context, query string, limit int) ([]ToolMatch, error)
}

// Bindings are the host callbacks; calls may come from any goroutine.
type Bindings interface {
	InvokeTool(ctx context.Context, in InvokeInput) (any, error)
	ListTools(ctx context.Context) ([]Tool, error)
	SetState(eid int64, state ExecState)
	SetError(eid int64, msg string)
	// EmitStdout and EmitStderr pass raw bytes; p is only valid during the
	// call.
	EmitStdout(eid int64, p []byte)
	EmitStderr(eid int64, p []byte)
	// EmitOutput merges a patch into the structured output; its values
	// are JSON as the program's runtime wrote it (valid UTF-8), which the
	// host stores and sends on without decoding.
	EmitOutput(eid int64, patch map[string]json.RawMessage)
}

type pauseKey struct{}

// WithPause returns ctx carrying the execution's clock control: the host
// calls Pause(ctx) while a tool call waits on a human, and the environment
// stops counting the execution's timeout until the returned resume runs.
func WithPause(ctx context.Context, pause func() (resume func())) context.Context {
	return context.WithValue(ctx, pauseKey{}, pause)
}

// Pause stops the clock of the execution behind ctx, if its environment
// supports it; call resume (once) to restart it.
func Pause(ctx context.Context) (resume func()) {
	if p, ok := ctx.Value(pauseKey{}).(func() func()); ok {
		return p()
	}
	return func() {}
}
