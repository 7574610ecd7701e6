-- The OpenTelemetry trace of a process's latest execution (issue 26): the
-- caller's, when its request carried a traceparent. Empty: not traced.
ALTER TABLE processes ADD COLUMN trace_id TEXT NOT NULL DEFAULT '';
