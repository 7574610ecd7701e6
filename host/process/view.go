package process

import (
	"time"

	"github.com/cyrnel/cyrnel/host/store"
)

// ProcessSummary is a process without its code and streams, as listings
// need it. host/api maps it to the wire shape.
type ProcessSummary struct {
	PID             int64
	Ref             string
	State           State
	ExitState       *string
	Reason          *string
	Error           string
	TimeoutMs       int64
	EnvConfig       map[string]any
	Environment     string
	Runs            int64
	StdoutTruncated bool
	StderrTruncated bool
	OutputTruncated bool
	CreatedAt       time.Time
	StartedAt       *time.Time
	FinishedAt      *time.Time
	DurationMs      *int64
	HostID          string
	CPUMs           *int64
	Session         string
	PeakMemoryBytes *int64
	Owner           string
	TraceID         string
}

// Process is a process with what its latest execution produced.
type Process struct {
	ProcessSummary
	Output map[string]any
	Stdout string
	Stderr string
	Code   string
}

func viewOf(p *store.Process) *Process {
	v := &Process{ProcessSummary: ProcessSummary{
		PID: p.PID, Ref: p.Ref, State: State(p.State), ExitState: p.ExitState, Error: p.Error,
		TimeoutMs: p.TimeoutMs, EnvConfig: p.EnvConfig, Environment: p.Environment, Runs: p.Runs,
		StdoutTruncated: p.StdoutTruncated, StderrTruncated: p.StderrTruncated, OutputTruncated: p.OutputTruncated,
		CreatedAt: p.CreatedAt, StartedAt: p.StartedAt, FinishedAt: p.FinishedAt, DurationMs: p.DurationMs,
		HostID: p.HostID, CPUMs: p.CPUMs, PeakMemoryBytes: p.PeakMemoryBytes, Session: p.Session, Owner: p.Owner, TraceID: p.TraceID,
	}, Output: p.Output, Stdout: p.Stdout, Stderr: p.Stderr, Code: p.Code}
	if p.Reason != "" {
		reason := p.Reason
		v.Reason = &reason
	}
	if v.Output == nil {
		v.Output = map[string]any{}
	}
	return v
}

// States are every host state, in the order the API's spec lists them.
var States = []State{Idle, Queued, Running, Suspended, Terminating}
