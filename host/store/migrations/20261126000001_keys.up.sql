CREATE TABLE api_keys (
	id TEXT PRIMARY KEY,
	name TEXT NOT NULL,
	roles TEXT NOT NULL,
	hash {{.Blob}} NOT NULL,
	created_at {{.Time}} NOT NULL,
	expires_at {{.Time}},
	last_used_at {{.Time}}
);
--bun:split
CREATE UNIQUE INDEX api_keys_hash ON api_keys (hash);
--bun:split
CREATE TABLE changes (
	id {{.PK}},
	at {{.Time}} NOT NULL,
	key_id TEXT NOT NULL,
	action TEXT NOT NULL,
	target TEXT NOT NULL,
	detail TEXT NOT NULL
);
--bun:split
CREATE INDEX changes_at ON changes (at);
