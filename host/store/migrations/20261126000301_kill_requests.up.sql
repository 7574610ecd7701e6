-- A kill asked through one host for an execution another host runs: the
-- runner takes its requests at each sync, so a kill whose notification was
-- lost still arrives (the notification only hurries it).
CREATE TABLE kill_requests (
  host_id TEXT NOT NULL,
  pid BIGINT NOT NULL,
  requested_at {{.Time}} NOT NULL,
  PRIMARY KEY (host_id, pid)
);
