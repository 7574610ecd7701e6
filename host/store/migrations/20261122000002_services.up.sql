CREATE TABLE services (
    id TEXT PRIMARY KEY,
    adapter TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    source TEXT NOT NULL,
    hash TEXT NOT NULL,
    config_schema TEXT NOT NULL,
    secrets_schema TEXT NOT NULL,
    adapter_domain TEXT NOT NULL,
    config TEXT,
    secrets {{.Blob}},
    enabled BOOLEAN NOT NULL,
    created_at {{.Time}} NOT NULL,
    updated_at {{.Time}} NOT NULL
);
--bun:split
CREATE TABLE tools (
    service_id TEXT NOT NULL REFERENCES services (id) ON DELETE CASCADE,
    id TEXT NOT NULL,
    name TEXT NOT NULL,
    description TEXT NOT NULL,
    input_schema TEXT NOT NULL,
    output_schema TEXT NOT NULL,
    adapter_domain TEXT NOT NULL,
    enabled BOOLEAN NOT NULL,
    PRIMARY KEY (service_id, id)
);
