package store

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"
)

// RenewLease records that hostID lives for ttl more, on the database's
// clock (hosts' clocks may disagree; the database's is the one all read).
// PostgreSQL only: one host on SQLite needs no lease.
func (s *Store) RenewLease(ctx context.Context, hostID string, ttl time.Duration) error {
	_, err := s.DB.ExecContext(ctx, `INSERT INTO hosts (host_id, lease_until) VALUES (?, now() + make_interval(secs => ?))
ON CONFLICT (host_id) DO UPDATE SET lease_until = EXCLUDED.lease_until`, hostID, ttl.Seconds())
	if err != nil {
		return fmt.Errorf("renew lease: %w", err)
	}
	// A host that died leaves its row; a day on, its processes are long
	// finished (hosts without a row count as lost too), so the row goes.
	if _, err := s.DB.ExecContext(ctx, "DELETE FROM hosts WHERE lease_until < now() - interval '1 day'"); err != nil {
		return fmt.Errorf("renew lease: forget dead hosts: %w", err)
	}
	return nil
}

// HostsAlive counts the hosts whose lease has not run out. PostgreSQL only.
func (s *Store) HostsAlive(ctx context.Context) (int, error) {
	var n int
	if err := s.DB.QueryRowContext(ctx, "SELECT count(*) FROM hosts WHERE lease_until > now()").Scan(&n); err != nil {
		return 0, fmt.Errorf("count live hosts: %w", err)
	}
	return n, nil
}

// DropLease removes hostID's lease (a host that stopped cleanly).
func (s *Store) DropLease(ctx context.Context, hostID string) error {
	if _, err := s.DB.ExecContext(ctx, "DELETE FROM hosts WHERE host_id = ?", hostID); err != nil {
		return fmt.Errorf("drop lease: %w", err)
	}
	return nil
}

// FinishLost moves every live process of a host other than self whose
// lease ran out (or that never had one) to idle with the given exit state
// and reason. PostgreSQL only.
func (t *Tx) FinishLost(ctx context.Context, self string, from []string, exitState, reason, msg string) (int64, error) {
	res, err := t.db.NewUpdate().Model((*Process)(nil)).
		Set("state = ?", "idle").Set("exit_state = ?", exitState).
		Set("reason = ?", reason).Set("error = ?", msg).Set("finished_at = now()").
		Where("state IN (?)", bun.List(from)).Where("host_id <> ?", self).
		Where("NOT EXISTS (SELECT 1 FROM hosts h WHERE h.host_id = process.host_id AND h.lease_until > now())").
		Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("finish processes of lost hosts: %w", err)
	}
	return res.RowsAffected()
}
