package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"
	"github.com/uptrace/bun/migrate"
)

// On SQLite, pids are not AUTOINCREMENT: that made every insert read and
// rewrite its row of sqlite_sequence, one more page in each commit on an
// execution's path. A pid is one past both the largest pid stored and
// the pid floor, the largest pid ever deleted, which a trigger raises: a
// pid is never given twice, even after the newest process is deleted
// (docs/decisions.md). PostgreSQL's identity column never reuses one.

// sqliteNextPID is the pid an insert on SQLite gives its process.
const sqliteNextPID = `(SELECT max(coalesce(max(pid), 0), coalesce((SELECT pid FROM process_pid_floor), 0)) + 1 FROM processes)`

// processesWithoutAutoincrement is the migration that rebuilds the
// processes table without AUTOINCREMENT on SQLite (and does nothing on
// PostgreSQL).
var processesWithoutAutoincrement = migrate.Migration{
	Name:    "20261124000001",
	Comment: "processes_without_autoincrement",
	Up: func(ctx context.Context, m *migrate.Migrator, _ *migrate.Migration) error {
		return rebuildProcesses(ctx, m.DB())
	},
}

// rebuildProcesses follows SQLite's procedure for a table change ALTER
// TABLE cannot make: create the new table, copy, drop, rename, all in one
// transaction on one connection with foreign keys off, so dropping the old
// table cascades to no process's files. The copy needs room for a second
// processes table until it commits; without it the upgrade fails as
// ErrFull and the database stays as it was.
func rebuildProcesses(ctx context.Context, db *bun.DB) error {
	if db.Dialect().Name() != dialect.SQLite {
		return nil
	}
	if err := rebuild(ctx, db); err != nil {
		return classify(fmt.Errorf("rebuild processes: %w", err))
	}
	// The copy went through the write-ahead log: give its room back now
	// rather than at the next checkpoint of a busy host.
	if _, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return fmt.Errorf("rebuild processes: checkpoint: %w", err)
	}
	return nil
}

// orphanFiles counts the files whose process is not there: rows a delete
// with foreign keys off (an operator's sqlite3) may have left behind.
const orphanFiles = `SELECT count(*) FROM process_files WHERE pid NOT IN (SELECT pid FROM processes)`

func rebuild(ctx context.Context, db *bun.DB) (err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	// foreign_keys cannot change inside a transaction, and it is the
	// connection's: back on before the pool has the connection again (if
	// that fails, so does the migration, and the store is not opened).
	if _, err := conn.ExecContext(ctx, "PRAGMA foreign_keys = OFF"); err != nil {
		return err
	}
	defer func() {
		if _, onErr := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA foreign_keys = ON"); onErr != nil && err == nil {
			err = fmt.Errorf("foreign keys back on: %w", onErr)
		}
	}()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	var schema string
	if err := tx.QueryRowContext(ctx, "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'processes'").Scan(&schema); err != nil {
		return err
	}
	if !strings.Contains(schema, "AUTOINCREMENT") {
		return nil // rebuilt by a run whose bookkeeping did not follow
	}
	var orphans int64
	if err := tx.QueryRowContext(ctx, orphanFiles).Scan(&orphans); err != nil {
		return err
	}
	// The table as it stands, every column added since included, only
	// without AUTOINCREMENT; same columns in the same order, so the copy
	// is a plain SELECT *.
	const autoKey, key = "pid INTEGER PRIMARY KEY AUTOINCREMENT", "pid INTEGER PRIMARY KEY"
	body, ok := strings.CutPrefix(schema, "CREATE TABLE processes (")
	if !ok || strings.Count(body, autoKey) != 1 {
		return fmt.Errorf("the processes table is not as the migrations made it: %q", schema)
	}
	for _, q := range []string{
		"CREATE TABLE processes_rebuilt (" + strings.Replace(body, autoKey, key, 1),
		`INSERT INTO processes_rebuilt SELECT * FROM processes`,
		`CREATE TABLE process_pid_floor (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    pid BIGINT NOT NULL
)`,
		// The sequence goes with the table it counts.
		`INSERT INTO process_pid_floor (one, pid)
 VALUES (1, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'processes'), 0))`,
		`DROP TABLE processes`,
		`ALTER TABLE processes_rebuilt RENAME TO processes`,
		`CREATE INDEX processes_ref_idx ON processes (ref, pid) WHERE ref <> ''`,
		`CREATE INDEX processes_live_idx ON processes (state, pid) WHERE state <> 'idle' AND state <> 'queued'`,
		`CREATE TRIGGER processes_pid_floor AFTER DELETE ON processes BEGIN
    UPDATE process_pid_floor SET pid = max(pid, OLD.pid);
END`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	// The copy keeps every pid, so no file may lose its process (files
	// orphaned before stay as they were).
	var after int64
	if err := tx.QueryRowContext(ctx, orphanFiles).Scan(&after); err != nil {
		return err
	}
	if after != orphans {
		return fmt.Errorf("%d files lost their process in the copy (%d before)", after, orphans)
	}
	return tx.Commit()
}
