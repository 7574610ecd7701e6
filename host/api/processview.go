package api

import (
	"time"

	"github.com/cyrnel/cyrnel/host/process"
)

// The wire shapes of processes: the domain's process package holds plain Go
// types, these carry the JSON names and the schema the spec publishes. Their
// enums come from the domain's lists through the named types of enums.go.

// ProcessSummary is a process as listings show it: without its code and streams.
type ProcessSummary struct {
	PID             int64          `json:"pid" doc:"Process id: positive, unique, never reused."`
	Ref             string         `json:"ref" doc:"Client-chosen label, for filtering."`
	State           processState   `json:"state" doc:"Host state."`
	ExitState       *exitState     `json:"exitState" nullable:"true" doc:"How the latest execution ended; null before the first."`
	Reason          *exitReason    `json:"reason" nullable:"true" doc:"Why the latest execution ended; null before the first."`
	Error           string         `json:"error" doc:"Why the latest execution failed (e.g. 'ValueError: boom'); empty otherwise."`
	TimeoutMs       int64          `json:"timeoutMs" doc:"Effective timeout of an execution, in milliseconds."`
	EnvConfig       map[string]any `json:"envConfig" nullable:"true" doc:"Per-execution environment configuration, as submitted."`
	Environment     string         `json:"environment" doc:"Module id of the environment that ran the latest execution."`
	Runs            int64          `json:"runs" doc:"How many times the process was started."`
	StdoutTruncated bool           `json:"stdoutTruncated" doc:"stdout went past its cap and was cut."`
	StderrTruncated bool           `json:"stderrTruncated" doc:"stderr went past its cap and was cut."`
	OutputTruncated bool           `json:"outputTruncated" doc:"The structured output went past its cap: keys that would have grown it further were dropped."`
	CreatedAt       time.Time      `json:"createdAt"`
	StartedAt       *time.Time     `json:"startedAt" nullable:"true" doc:"When the latest execution started running."`
	FinishedAt      *time.Time     `json:"finishedAt" nullable:"true" doc:"When the latest execution ended."`
	DurationMs      *int64         `json:"durationMs" nullable:"true" doc:"Running time of the latest execution."`
	HostID          string         `json:"hostId" doc:"The host that runs or ran the latest execution (the host that stored the process, before it first runs)."`
	CPUMs           *int64         `json:"cpuMs" nullable:"true" doc:"CPU time the latest execution's whole process tree used, in milliseconds, as the host measured it; null when unknown or before it ends."`
	Session         string         `json:"session,omitempty" doc:"The session the process runs in (POST /sessions); absent: an interpreter of its own."`
	PeakMemoryBytes *int64         `json:"peakMemoryBytes" nullable:"true" doc:"Peak memory of the latest execution's whole process tree, in bytes, as the host measured it; null when unknown or before it ends."`
	Owner           string         `json:"owner,omitempty" doc:"The id of the API key that created the process; a runner key sees only its own. Absent when no key did (a server without authentication)."`
	TraceID         string         `json:"traceId,omitempty" doc:"The OpenTelemetry trace (32 hex digits) of the latest execution: the caller's when its request carried a traceparent header. Absent when tracing is off."`
}

// Process is a process with what its latest execution produced.
type Process struct {
	ProcessSummary
	Output map[string]any `json:"output" doc:"Structured output: the merge of every cyrnel.output() patch."`
	Stdout string         `json:"stdout" doc:"Captured standard output, decoded as UTF-8."`
	Stderr string         `json:"stderr" doc:"Captured standard error, decoded as UTF-8."`
}

// Display is one rich display of an execution.
type Display struct {
	Index int               `json:"index" doc:"Position among the process's displays, from 0."`
	Kind  displayKind       `json:"kind" doc:"display: cyrnel.display() or a figure left open; result: the value of the final expression."`
	Data  map[string]string `json:"data" doc:"The MIME bundle: text types as text, binary types (image/png, ...) as base64."`
}

// OutputFile is one file a process left in its workspace.
type OutputFile struct {
	Path       string    `json:"path"`
	Size       int64     `json:"size"`
	ModifiedAt time.Time `json:"modifiedAt"`
}

func processSummaryOf(p *process.ProcessSummary) ProcessSummary {
	return ProcessSummary{
		PID: p.PID, Ref: p.Ref, State: processState(p.State), ExitState: (*exitState)(p.ExitState), Reason: (*exitReason)(p.Reason), Error: p.Error,
		TimeoutMs: p.TimeoutMs, EnvConfig: p.EnvConfig, Environment: p.Environment, Runs: p.Runs,
		StdoutTruncated: p.StdoutTruncated, StderrTruncated: p.StderrTruncated, OutputTruncated: p.OutputTruncated,
		CreatedAt: p.CreatedAt, StartedAt: p.StartedAt, FinishedAt: p.FinishedAt, DurationMs: p.DurationMs,
		HostID: p.HostID, CPUMs: p.CPUMs, Session: p.Session, PeakMemoryBytes: p.PeakMemoryBytes,
		Owner: p.Owner, TraceID: p.TraceID,
	}
}

func processOf(p *process.Process) *Process {
	return &Process{ProcessSummary: processSummaryOf(&p.ProcessSummary), Output: p.Output, Stdout: p.Stdout, Stderr: p.Stderr}
}

func processSummariesOf(ps []process.ProcessSummary) []ProcessSummary {
	out := make([]ProcessSummary, len(ps))
	for i := range ps {
		out[i] = processSummaryOf(&ps[i])
	}
	return out
}

func displayOf(d process.Display) Display {
	return Display{Index: d.Index, Kind: displayKind(d.Kind), Data: d.Data}
}

func displaysOf(ds []process.Display) []Display {
	out := make([]Display, len(ds))
	for i, d := range ds {
		out[i] = displayOf(d)
	}
	return out
}

func outputFilesOf(fs []process.OutputFile) []OutputFile {
	out := make([]OutputFile, len(fs))
	for i, f := range fs {
		out[i] = OutputFile{Path: f.Path, Size: f.Size, ModifiedAt: f.ModifiedAt}
	}
	return out
}
