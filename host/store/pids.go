package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/dialect"
	"github.com/uptrace/bun/migrate"
)

// Pids come from the database and are never given twice (DESIGN §3):
// PostgreSQL's identity column, SQLite's AUTOINCREMENT (whose sequence
// outlives the deletion of the newest row).
//
// processesWithAutoincrement brings back AUTOINCREMENT on a SQLite
// database whose processes table a version that gave pids by hand rebuilt
// without it, starting the sequence past every pid that version gave (its
// pid floor, the largest pid ever deleted, included). On any other database
// it does nothing.
var processesWithAutoincrement = migrate.Migration{
	Name:    "20261126000900",
	Comment: "processes_with_autoincrement",
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
	rebuilt, err := rebuild(ctx, db)
	if err != nil {
		return classify(fmt.Errorf("rebuild processes: %w", err))
	}
	if !rebuilt {
		return nil
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

// The hand-given pids' leftovers: the floor and the trigger that raised it.
const (
	pidFloorTable   = "process_pid_floor"
	pidFloorTrigger = "processes_pid_floor"
)

func rebuild(ctx context.Context, db *bun.DB) (rebuilt bool, err error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	// foreign_keys cannot change inside a transaction, and it is the
	// connection's: back on before the pool has the connection again (if
	// that fails, so does the migration, and the store is not opened).
	if _, err := conn.ExecContext(ctx, "PRAGMA foreign_keys = OFF"); err != nil {
		return false, err
	}
	defer func() {
		if _, onErr := conn.ExecContext(context.WithoutCancel(ctx), "PRAGMA foreign_keys = ON"); onErr != nil && err == nil {
			err = fmt.Errorf("foreign keys back on: %w", onErr)
		}
	}()
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback() //nolint:errcheck // after Commit it does nothing
	var schema string
	if err := tx.QueryRowContext(ctx, "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'processes'").Scan(&schema); err != nil {
		return false, err
	}
	if strings.Contains(schema, "AUTOINCREMENT") {
		return false, nil // as the migrations made it: pids were never given by hand
	}
	if err := copyWithAutoincrement(ctx, tx, schema); err != nil {
		return false, err
	}
	return true, tx.Commit()
}

// copyWithAutoincrement replaces the processes table by a copy whose pid
// is AUTOINCREMENT, with the same columns, indexes and rows, and the
// sequence at the largest pid given so far.
func copyWithAutoincrement(ctx context.Context, tx bun.Tx, schema string) error {
	var orphans, floor int64
	if err := tx.QueryRowContext(ctx, orphanFiles).Scan(&orphans); err != nil {
		return err
	}
	var hasFloor bool
	if err := tx.QueryRowContext(ctx, "SELECT count(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = ?", pidFloorTable).Scan(&hasFloor); err != nil {
		return err
	}
	given := "SELECT coalesce(max(pid), 0) FROM processes"
	if hasFloor {
		given = "SELECT max(coalesce(max(pid), 0), coalesce((SELECT pid FROM " + pidFloorTable + "), 0)) FROM processes"
	}
	if err := tx.QueryRowContext(ctx, given).Scan(&floor); err != nil {
		return err
	}
	// The indexes (and any trigger but the floor's) go with the old table:
	// made again, as they stand, on the new one.
	var again []string
	if err := tx.NewSelect().Column("sql").Table("sqlite_schema").
		Where("tbl_name = 'processes' AND type IN ('index', 'trigger') AND sql IS NOT NULL AND name <> ?", pidFloorTrigger).
		Scan(ctx, &again); err != nil {
		return err
	}
	// The table as it stands, every column added since included, only
	// with AUTOINCREMENT; same columns in the same order, so the copy is a
	// plain SELECT *.
	const key, autoKey = "pid INTEGER PRIMARY KEY", "pid INTEGER PRIMARY KEY AUTOINCREMENT"
	// A table renamed into place is stored as CREATE TABLE "processes".
	head, body, ok := strings.Cut(schema, "(")
	if head = strings.ReplaceAll(head, `"`, ""); !ok || head != "CREATE TABLE processes " || strings.Count(body, key) != 1 {
		return fmt.Errorf("the processes table is not as the migrations made it: %q", schema)
	}
	steps := []string{
		"CREATE TABLE processes_rebuilt (" + strings.Replace(body, key, autoKey, 1),
		`INSERT INTO processes_rebuilt SELECT * FROM processes`,
		`DROP TABLE processes`,
		`ALTER TABLE processes_rebuilt RENAME TO processes`,
		`DROP TABLE IF EXISTS ` + pidFloorTable,
		// The copy left the sequence at the largest pid stored; a deleted
		// newest pid may lie beyond it.
		`INSERT INTO sqlite_sequence (name, seq) SELECT 'processes', 0 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'processes')`,
	}
	for _, q := range append(steps, again...) {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	if _, err := tx.ExecContext(ctx, "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'processes'", floor); err != nil {
		return err
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
	return nil
}
