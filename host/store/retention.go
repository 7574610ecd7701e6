package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/uptrace/bun"
)

// processBytes is what a stored process's row counts toward the size
// bound: the bytes of its code, streams, output and displays (its files are
// counted from process_files).
const processBytes = `octet_length(code) + octet_length(stdout) + octet_length(stderr) +
  COALESCE(octet_length(output), 0) + COALESCE(octet_length(displays), 0)`

// RetentionCut is where the retention bounds cut the processes: finished
// (idle) processes with a pid below SizeBelow are past the size bound, and
// those finished before Before with a pid below AgeBelow past the age
// bound (0: no process past that bound). A process created before Before
// has a lower pid than every one created from Before on (pids are handed
// out in creation order, a late one within a round is caught by the next),
// so each bound names a range of the oldest pids and deleting costs what is
// deleted, not the table.
type RetentionCut struct {
	SizeBelow int64
	AgeBelow  int64
	Before    time.Time
}

// None says no process is past either bound.
func (c RetentionCut) None() bool { return c.SizeBelow == 0 && c.AgeBelow == 0 }

// RetentionCut finds where the bounds cut, reading only, in one snapshot,
// neither bound past its newest process: the age bound from the oldest
// pids up to the first one created at before or later (zero: no age
// bound); the size bound, when the processes stored (live ones too) and
// their files hold more than maxBytes (0: no size bound), from the oldest
// up, a page at a time, until what is left fits, newest kept first
// (octet_length: bytes, which both databases tell without reading a value
// stored apart). Nothing waits for it, as every execution would for a
// statement inside the one writer.
func (s *Store) RetentionCut(ctx context.Context, maxBytes int64, before time.Time) (RetentionCut, error) {
	var cut RetentionCut
	opts := &sql.TxOptions{ReadOnly: true, Isolation: sql.LevelRepeatableRead}
	err := s.DB.RunInTx(ctx, opts, func(ctx context.Context, tx bun.Tx) error {
		// Past the newest pid of the snapshot nothing is cut: a process
		// created since (idle before it ever ran) is not the round's.
		var newest int64
		if err := tx.NewSelect().Model((*Process)(nil)).ColumnExpr("COALESCE(MAX(pid), 0)").Scan(ctx, &newest); err != nil {
			return fmt.Errorf("find the newest process: %w", err)
		}
		if newest == 0 {
			return nil
		}
		if !before.IsZero() {
			cut.Before = before.UTC()
			err := tx.NewSelect().Model((*Process)(nil)).Column("pid").
				Where("created_at >= ?", cut.Before).Order("pid").Limit(1).Scan(ctx, &cut.AgeBelow)
			if errors.Is(err, sql.ErrNoRows) {
				cut.AgeBelow = newest + 1 // every process was created before it
			} else if err != nil {
				return fmt.Errorf("find the age bound: %w", err)
			}
		}
		if maxBytes <= 0 {
			return nil
		}
		var total int64
		if err := tx.QueryRowContext(ctx, "SELECT COALESCE(SUM("+processBytes+"), 0) + "+
			"COALESCE((SELECT SUM(size) FROM process_files), 0) FROM processes").Scan(&total); err != nil {
			return fmt.Errorf("sum the processes stored: %w", err)
		}
		if total > maxBytes {
			below, err := sizeCut(ctx, tx, total-maxBytes)
			if err != nil {
				return fmt.Errorf("find the size bound: %w", err)
			}
			cut.SizeBelow = min(below, newest+1)
		}
		return nil
	})
	if err != nil {
		return RetentionCut{}, fmt.Errorf("retention: %w", classify(err))
	}
	return cut, nil
}

// sizeCutPage is how many processes the size bound's walk reads a query: a
// driver that closes a result early may still read it to its end.
const sizeCutPage = 1000

// sizeCut walks the processes from the oldest, a page at a time, and
// returns the pid of the first one with excess bytes behind it: the oldest
// the size bound keeps (past the last one read when the walk ran out).
func sizeCut(ctx context.Context, tx bun.Tx, excess int64) (int64, error) {
	var behind, last int64
	for {
		rows, err := tx.QueryContext(ctx, "SELECT pid, "+processBytes+
			" + COALESCE((SELECT SUM(f.size) FROM process_files f WHERE f.pid = p.pid), 0)"+
			" FROM processes p WHERE pid > ? ORDER BY pid LIMIT ?", last, sizeCutPage)
		if err != nil {
			return 0, err
		}
		read := 0
		for rows.Next() {
			var pid, n int64
			if err := rows.Scan(&pid, &n); err != nil {
				rows.Close()
				return 0, err
			}
			read++
			if behind >= excess {
				rows.Close()
				return pid, nil
			}
			behind, last = behind+n, pid
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return 0, err
		}
		if read < sizeCutPage {
			return last + 1, nil
		}
	}
}

// PruneProcesses deletes at most limit finished (idle) processes past cut,
// the oldest first, with their files (their code, streams, output,
// displays and files), and returns how many: one batch, so the one writer
// holds the database for a bounded time. Live processes are never deleted.
func (t *Tx) PruneProcesses(ctx context.Context, cut RetentionCut, limit int64) (int64, error) {
	if cut.None() {
		return 0, nil
	}
	past := pastRetention(t.db, cut, limit)
	if !t.s.local {
		// Hosts pruning together pass over each other's batches instead
		// of waiting on them.
		past = past.For("UPDATE SKIP LOCKED")
	}
	// The batch as a WITH query, read once (PostgreSQL may run a subquery
	// that locks once per row it compares, each time a new batch); idle
	// checked again on the row deleted, as PostgreSQL checks a row another
	// host changed meanwhile by the outer conditions only.
	res, err := t.db.NewDelete().With("past", past).Model((*Process)(nil)).
		Where("pid IN (SELECT pid FROM past)").Where("state = 'idle'").Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("prune processes: %w", err)
	}
	return res.RowsAffected()
}

// pastRetention selects the pids of at most limit finished processes past
// cut, the oldest first, from the range of pids below the cut only.
func pastRetention(db bun.IDB, cut RetentionCut, limit int64) *bun.SelectQuery {
	return db.NewSelect().Model((*Process)(nil)).Column("pid").
		Where("pid < ?", max(cut.SizeBelow, cut.AgeBelow)).Where("state = 'idle'").
		WhereGroup(" AND ", func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("pid < ?", cut.SizeBelow).
				WhereOr("pid < ? AND finished_at < ?", cut.AgeBelow, cut.Before)
		}).Order("pid").Limit(limit)
}

// Reclaim gives the room deleted rows left back to the file system: on
// SQLite (auto_vacuum incremental) the free pages are dropped from the
// database file and the write-ahead log is truncated. PostgreSQL reuses
// its room itself (autovacuum).
func (s *Store) Reclaim(ctx context.Context) error {
	if !s.local {
		return nil
	}
	// A chunk a statement: a statement holds SQLite's one writer, and
	// giving back what a large prune freed (hundreds of MB) in one held
	// every execution's rows for a third of a second.
	// It stops when a chunk gives back nothing: a database that could not
	// be converted to incremental auto_vacuum (no room for the copy) keeps
	// its free pages.
	for before := int64(-1); ; {
		var free int64
		if err := s.DB.QueryRowContext(ctx, "PRAGMA freelist_count").Scan(&free); err != nil {
			return fmt.Errorf("reclaim free pages: %w", classify(err))
		}
		if free == 0 || free == before {
			break
		}
		before = free
		// Stepped to its end: each step frees a page (an Exec may step once).
		rows, err := s.DB.QueryContext(ctx, fmt.Sprintf("PRAGMA incremental_vacuum(%d)", reclaimChunk))
		if err != nil {
			return fmt.Errorf("reclaim free pages: %w", classify(err))
		}
		for rows.Next() {
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return fmt.Errorf("reclaim free pages: %w", classify(err))
		}
	}
	if _, err := s.DB.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return fmt.Errorf("reclaim the write-ahead log: %w", classify(err))
	}
	return s.keepReserve()
}

// reclaimChunk is how many free pages (4 KiB each) one statement of
// Reclaim gives back.
const reclaimChunk = 512

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
