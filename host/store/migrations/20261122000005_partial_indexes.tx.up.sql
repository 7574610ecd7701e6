DROP INDEX processes_state_idx;
--bun:split
CREATE INDEX processes_live_idx ON processes (state, pid) WHERE state <> 'idle';
--bun:split
DROP INDEX processes_ref_idx;
--bun:split
CREATE INDEX processes_ref_idx ON processes (ref, pid) WHERE ref <> '';
