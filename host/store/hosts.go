package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
)

// RenewLease records that hostID lives for ttl more, on the database's
// clock (hosts' clocks may disagree; the database's is the one all read),
// and is reached at addr. An empty addr (a renewal before the host knows
// its address) keeps the stored one: a renewal begun before the host
// advertised may land after it did, and must not leave the host
// unreachable until the next renewal. PostgreSQL only: one host on SQLite
// needs no lease.
func (s *Store) RenewLease(ctx context.Context, hostID, addr string, ttl time.Duration) error {
	_, err := s.DB.ExecContext(ctx, `INSERT INTO hosts (host_id, lease_until, address) VALUES (?, now() + make_interval(secs => ?), ?)
ON CONFLICT (host_id) DO UPDATE SET lease_until = EXCLUDED.lease_until, address = COALESCE(NULLIF(EXCLUDED.address, ''), hosts.address)`, hostID, ttl.Seconds(), addr)
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

// ErrHostLost: the host has no live lease (it stopped, or stopped renewing
// it), so nothing can be forwarded to it.
var ErrHostLost = errors.New("host has no live lease")

// HostAddress is the address hostID advertises while its lease lives;
// ErrHostLost when it has none, or has not told its address yet.
func (s *Store) HostAddress(ctx context.Context, hostID string) (string, error) {
	var addr string
	err := s.DB.NewSelect().Table("hosts").Column("address").
		Where("host_id = ?", hostID).Where("lease_until > now()").Scan(ctx, &addr)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && addr == "") {
		return "", fmt.Errorf("host %s: %w", hostID, ErrHostLost)
	}
	if err != nil {
		return "", s.classify(fmt.Errorf("address of host %s: %w", hostID, err))
	}
	return addr, nil
}

// EndLostSessions ends, with reason, the live sessions of every host other
// than self whose lease ran out (or that never had one): their interpreters
// went with their host. PostgreSQL only; doing it twice is harmless.
func (s *Store) EndLostSessions(ctx context.Context, self, reason string) (int64, error) {
	res, err := s.DB.NewUpdate().Model((*Session)(nil)).
		Set("state = ?", SessionEnded).Set("end_reason = ?", reason).Set("ended_at = now()").
		Where("state <> ?", SessionEnded).Where("host_id <> ?", self).
		Where("NOT EXISTS (SELECT 1 FROM hosts h WHERE h.host_id = session.host_id AND h.lease_until > now())").
		Exec(ctx)
	if err != nil {
		return 0, s.classify(fmt.Errorf("end sessions of lost hosts: %w", err))
	}
	return res.RowsAffected()
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
	lost := t.db.NewSelect().Model((*Process)(nil)).Column("pid").
		Where("state IN (?)", bun.List(from)).Where("host_id <> ?", self).
		Where("NOT EXISTS (SELECT 1 FROM hosts h WHERE h.host_id = process.host_id AND h.lease_until > now())")
	// Their pending approvals expire in the same transaction: a reader that
	// sees a process ended host_lost never finds its approval pending.
	if _, err := t.db.NewUpdate().Model((*Approval)(nil)).
		Set("state = ?", "expired").Set("decided_at = now()").
		Where("state = ?", "pending").Where("pid IN (?)", lost).
		Exec(ctx); err != nil {
		return 0, fmt.Errorf("expire approvals of lost hosts' processes: %w", err)
	}
	res, err := t.db.NewUpdate().Model((*Process)(nil)).
		Set("state = ?", "idle").Set("exit_state = ?", exitState).
		Set("reason = ?", reason).Set("error = ?", msg).Set("finished_at = now()").
		Where("pid IN (?)", lost).
		Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("finish processes of lost hosts: %w", err)
	}
	return res.RowsAffected()
}
