CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    pid BIGINT,
    service_id TEXT NOT NULL,
    tool_id TEXT NOT NULL,
    parameters TEXT NOT NULL,
    created_at {{.Time}} NOT NULL,
    expires_at {{.Time}} NOT NULL,
    decided_at {{.Time}}
);
--bun:split
CREATE INDEX approvals_state_idx ON approvals (state, created_at);
--bun:split
CREATE INDEX approvals_pid_idx ON approvals (pid, created_at) WHERE pid IS NOT NULL;
--bun:split
CREATE TABLE tool_calls (
    id {{.PK}},
    at {{.Time}} NOT NULL,
    pid BIGINT,
    service_id TEXT NOT NULL,
    tool_id TEXT NOT NULL,
    policy TEXT NOT NULL,
    approval_id TEXT,
    outcome TEXT NOT NULL,
    status INTEGER,
    duration_ms DOUBLE PRECISION NOT NULL,
    parameters TEXT NOT NULL,
    source TEXT NOT NULL
);
--bun:split
CREATE INDEX tool_calls_pid_idx ON tool_calls (pid, id) WHERE pid IS NOT NULL;
--bun:split
CREATE INDEX tool_calls_tool_idx ON tool_calls (service_id, tool_id, id);
--bun:split
CREATE INDEX tool_calls_at_idx ON tool_calls (at);
