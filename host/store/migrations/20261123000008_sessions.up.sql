CREATE TABLE sessions (
	id TEXT PRIMARY KEY,
	module TEXT NOT NULL,
	state TEXT NOT NULL,
	ref TEXT NOT NULL,
	env_config TEXT,
	idle_timeout_ms BIGINT NOT NULL,
	max_lifetime_ms BIGINT NOT NULL,
	host_id TEXT NOT NULL,
	created_at {{.Time}} NOT NULL,
	last_used_at {{.Time}} NOT NULL,
	ended_at {{.Time}},
	end_reason TEXT NOT NULL,
	cpu_ms BIGINT,
	memory_bytes BIGINT
);
--bun:split
CREATE INDEX sessions_state ON sessions (state);
--bun:split
ALTER TABLE processes ADD COLUMN session TEXT NOT NULL DEFAULT '';
--bun:split
ALTER TABLE processes ADD COLUMN displays TEXT;
--bun:split
CREATE TABLE process_files (
	pid BIGINT NOT NULL REFERENCES processes (pid) ON DELETE CASCADE,
	path TEXT NOT NULL,
	size BIGINT NOT NULL,
	modified_at {{.Time}} NOT NULL,
	content {{.Blob}} NOT NULL,
	PRIMARY KEY (pid, path)
);
