package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/uptrace/bun"
)

// PruneProcesses deletes finished (idle) processes, with their files, that
// finished before before (zero: no age bound) and, newest kept first, those
// past the first maxBytes of stored processes (0: no size bound): their
// code, streams, output, displays and files. Live processes are never
// deleted, but count toward the size.
func (t *Tx) PruneProcesses(ctx context.Context, maxBytes int64, before time.Time) (int64, error) {
	var n int64
	if !before.IsZero() {
		res, err := t.db.NewDelete().Model((*Process)(nil)).
			Where("state = 'idle'").Where("finished_at < ?", before.UTC()).Exec(ctx)
		if err != nil {
			return 0, fmt.Errorf("prune processes by age: %w", err)
		}
		k, _ := res.RowsAffected()
		n += k
	}
	if maxBytes > 0 {
		res, err := t.db.ExecContext(ctx, `DELETE FROM processes WHERE pid IN (
  SELECT pid FROM (
    SELECT p.pid, p.state,
      SUM(length(p.code) + length(p.stdout) + length(p.stderr) + COALESCE(length(p.output), 0) +
          COALESCE(length(p.displays), 0) + COALESCE(f.bytes, 0)) OVER (ORDER BY p.pid DESC) AS total
    FROM processes p LEFT JOIN (SELECT pid, SUM(size) AS bytes FROM process_files GROUP BY pid) f ON f.pid = p.pid
  ) sized WHERE total > ? AND state = 'idle')`, maxBytes)
		if err != nil {
			return n, fmt.Errorf("prune processes by size: %w", err)
		}
		k, _ := res.RowsAffected()
		n += k
	}
	return n, nil
}

// Reclaim gives the room deleted rows left back to the file system: on
// SQLite (auto_vacuum incremental) the free pages are dropped from the
// database file and the write-ahead log is truncated. PostgreSQL reuses
// its room itself (autovacuum).
func (s *Store) Reclaim(ctx context.Context) error {
	if !s.local {
		return nil
	}
	// Stepped to its end: each step frees pages (an Exec may step once).
	rows, err := s.DB.QueryContext(ctx, "PRAGMA incremental_vacuum")
	if err != nil {
		return fmt.Errorf("reclaim free pages: %w", classify(err))
	}
	for rows.Next() {
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("reclaim free pages: %w", classify(err))
	}
	if _, err := s.DB.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return fmt.Errorf("reclaim the write-ahead log: %w", classify(err))
	}
	return s.keepReserve()
}

// incrementalVacuum turns a SQLite database made without auto_vacuum into
// one whose free pages Reclaim can drop. It runs first at Open, on the
// pool's only connection: a WAL database changes auto_vacuum only by a
// VACUUM outside WAL mode, which rewrites the file once (needing room for a
// copy; without it the database stays as it was, and the next start tries
// again).
func incrementalVacuum(ctx context.Context, db *bun.DB) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	var mode int
	if err := conn.QueryRowContext(ctx, "PRAGMA auto_vacuum").Scan(&mode); err != nil {
		return fmt.Errorf("read auto_vacuum: %w", err)
	}
	if mode == 2 { // incremental
		return nil
	}
	for _, stmt := range []string{"PRAGMA journal_mode = DELETE", "PRAGMA auto_vacuum = INCREMENTAL", "VACUUM"} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			err = fmt.Errorf("convert to incremental auto_vacuum: %s: %w", stmt, classify(err))
			_, werr := conn.ExecContext(ctx, "PRAGMA journal_mode = WAL")
			return errors.Join(err, werr)
		}
	}
	if _, err := conn.ExecContext(ctx, "PRAGMA journal_mode = WAL"); err != nil {
		return fmt.Errorf("convert to incremental auto_vacuum: back to WAL: %w", err)
	}
	return nil
}

// reserveFile holds room in the data directory that only deletes may use:
// on a full disk a delete needs room to log what it frees.
const (
	reserveFile  = "reserve"
	reserveBytes = 8 << 20
)

// keepReserve makes the reserve file when it is missing and there is room.
func (s *Store) keepReserve() error {
	if s.reserve == "" {
		return nil
	}
	if _, err := os.Stat(s.reserve); err == nil {
		return nil
	}
	f, err := os.OpenFile(s.reserve, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("make the reserve: %w", err)
	}
	_, err = f.Write(make([]byte, reserveBytes))
	if err = errors.Join(err, f.Sync(), f.Close()); err != nil {
		// No room yet (the next Reclaim tries again): no part-made reserve.
		return errors.Join(fmt.Errorf("make the reserve: %w", err), os.Remove(s.reserve))
	}
	return nil
}

// FreeReserve gives the reserve's room back to the file system, so a delete
// on a full disk can proceed; Reclaim makes it again once there is room.
func (s *Store) FreeReserve() bool {
	if s.reserve == "" {
		return false
	}
	return os.Remove(s.reserve) == nil
}

// reservePath is where the reserve of a SQLite database in dataDir lives.
func reservePath(dataDir string) string { return filepath.Join(dataDir, reserveFile) }
