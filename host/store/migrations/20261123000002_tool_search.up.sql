{{if .SQLite}}CREATE VIRTUAL TABLE tool_search USING fts5(
    service_id UNINDEXED, tool_id UNINDEXED, ident, summary, description, params,
    tokenize = 'porter unicode61'
){{else}}CREATE TABLE tool_search (
    service_id TEXT NOT NULL,
    tool_id TEXT NOT NULL,
    doc TSVECTOR NOT NULL,
    PRIMARY KEY (service_id, tool_id),
    FOREIGN KEY (service_id, tool_id) REFERENCES tools (service_id, id) ON DELETE CASCADE
){{end}}
{{if not .SQLite}}--bun:split
CREATE INDEX tool_search_doc_idx ON tool_search USING GIN (doc){{end}}
