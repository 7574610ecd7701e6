package store

// Columns of the processes table that writes name (TransitionProcess,
// TransitionRun): one spelling each, checked against the model by
// TestColumnNamesAreTheModels.
const (
	ProcState           = "state"
	ProcExitState       = "exit_state"
	ProcReason          = "reason"
	ProcError           = "error"
	ProcOutput          = "output"
	ProcStdout          = "stdout"
	ProcStderr          = "stderr"
	ProcStdoutTruncated = "stdout_truncated"
	ProcStderrTruncated = "stderr_truncated"
	ProcOutputTruncated = "output_truncated"
	ProcStartedAt       = "started_at"
	ProcFinishedAt      = "finished_at"
	ProcDurationMs      = "duration_ms"
	ProcCPUMs           = "cpu_ms"
	ProcPeakMemoryBytes = "peak_memory_bytes"
	ProcEnvironment     = "environment"
	ProcRuns            = "runs"
	ProcHostID          = "host_id"
	ProcDisplays        = "displays"
	ProcTraceID         = "trace_id"
)

// Columns of the sessions table that writes name (UpdateSession).
const (
	SesState       = "state"
	SesLastUsedAt  = "last_used_at"
	SesEndReason   = "end_reason"
	SesEndedAt     = "ended_at"
	SesCPUMs       = "cpu_ms"
	SesMemoryBytes = "memory_bytes"
)
