{{if .SQLite}}
DROP INDEX processes_live_idx;
--bun:split
CREATE INDEX processes_live_idx ON processes (state, pid) WHERE state <> 'idle' AND state <> 'queued';
{{else}}
SELECT 1;
{{end}}
