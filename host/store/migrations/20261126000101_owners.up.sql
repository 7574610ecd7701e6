-- Who owns what and who did what (DESIGN §13 "Keys and roles"): the key id
-- that created a process or a session, the key whose execution asked for an
-- approval and the key that decided it, the key behind each tool call. ''
-- where no key acted (the host itself, or a server without authentication).
ALTER TABLE processes ADD COLUMN owner TEXT NOT NULL DEFAULT '';
--bun:split
-- A runner's listing reads its own processes newest first. Only listings of
-- runner keys are scoped, so rows nobody owns and rows of the bootstrap admin
-- key (DESIGN §13; a host used with that key alone) stay out of the index and
-- their inserts cost no page of it.
CREATE INDEX processes_owner_idx ON processes (owner, pid) WHERE owner <> '' AND owner <> 'bootstrap';
--bun:split
ALTER TABLE sessions ADD COLUMN owner TEXT NOT NULL DEFAULT '';
--bun:split
CREATE INDEX sessions_owner_idx ON sessions (owner, created_at, id) WHERE owner <> '';
--bun:split
ALTER TABLE approvals ADD COLUMN key_id TEXT NOT NULL DEFAULT '';
--bun:split
ALTER TABLE approvals ADD COLUMN decided_by TEXT NOT NULL DEFAULT '';
--bun:split
ALTER TABLE tool_calls ADD COLUMN key_id TEXT NOT NULL DEFAULT '';
