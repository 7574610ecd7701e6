-- A process's files in parts of at most 1 MiB, so that a large file is
-- stored and downloaded a part at a time (bounded memory). Rows of
-- process_files written before keep their content there and have no parts.
CREATE TABLE process_file_parts (
	pid BIGINT NOT NULL,
	path TEXT NOT NULL,
	part INTEGER NOT NULL,
	data {{.Blob}} NOT NULL,
	PRIMARY KEY (pid, path, part),
	FOREIGN KEY (pid, path) REFERENCES process_files (pid, path) ON DELETE CASCADE
);
