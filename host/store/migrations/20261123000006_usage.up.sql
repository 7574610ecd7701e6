ALTER TABLE processes ADD COLUMN cpu_ms BIGINT;
--bun:split
ALTER TABLE processes ADD COLUMN peak_memory_bytes BIGINT;
