CREATE TABLE processes (
    pid {{.PK}},
    ref TEXT NOT NULL DEFAULT '',
    code TEXT NOT NULL,
    state TEXT NOT NULL,
    exit_state TEXT,
    reason TEXT NOT NULL DEFAULT '',
    error TEXT NOT NULL DEFAULT '',
    timeout_ms BIGINT NOT NULL,
    env_config TEXT,
    environment TEXT NOT NULL DEFAULT '',
    output TEXT,
    stdout TEXT NOT NULL DEFAULT '',
    stderr TEXT NOT NULL DEFAULT '',
    stdout_truncated BOOLEAN NOT NULL DEFAULT FALSE,
    stderr_truncated BOOLEAN NOT NULL DEFAULT FALSE,
    runs BIGINT NOT NULL DEFAULT 0,
    created_at {{.Time}} NOT NULL,
    started_at {{.Time}},
    finished_at {{.Time}},
    duration_ms BIGINT
);
--bun:split
CREATE INDEX processes_state_idx ON processes (state);
--bun:split
CREATE INDEX processes_ref_idx ON processes (ref, pid);
--bun:split
CREATE TABLE settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
--bun:split
CREATE TABLE modules (
    id TEXT PRIMARY KEY,
    enabled BOOLEAN NOT NULL DEFAULT TRUE,
    config TEXT,
    secrets {{.Blob}},
    updated_at {{.Time}} NOT NULL
);
