-- Each host's lease (issue 13): a host renews lease_until while it lives;
-- another host finishes the executions of one whose lease ran out.
CREATE TABLE hosts (
  host_id TEXT PRIMARY KEY,
  lease_until {{.Time}} NOT NULL
);
