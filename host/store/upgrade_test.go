package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/migrate"
)

// oldDatabase opens the SQLite database at url and runs only the
// migrations whose names sort before stop: a database as an earlier
// version left it.
func oldDatabase(t *testing.T, url, stop string) *bun.DB {
	t.Helper()
	ctx := context.Background()
	db, tmpl, err := connect(url, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	files := fstest.MapFS{}
	entries, err := fs.ReadDir(sub, ".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() < stop {
			b, _ := fs.ReadFile(sub, e.Name())
			files[e.Name()] = &fstest.MapFile{Data: b}
		}
	}
	ms := migrate.NewMigrations()
	if err := ms.Discover(files); err != nil {
		t.Fatal(err)
	}
	m := migrate.NewMigrator(db, ms, migrate.WithTemplateData(tmpl), migrate.WithMarkAppliedOnSuccess(true))
	if err := m.Init(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return db
}

// TestUpgradeToPartialIndexes: a database with processes from before the
// partial indexes upgrades, listings find the same rows, and a migration
// that fails halfway leaves the database as it was, so the next start can
// apply it.
func TestUpgradeToPartialIndexes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "sqlite://" + t.TempDir() + "/cyrnel.db"
	db := oldDatabase(t, url, "20261122000005")
	states := []string{"idle", "queued", "running", "idle"}
	for i := range 40 {
		p := &Process{Code: "x", Ref: []string{"", "nightly"}[i%2], State: states[i%4], TimeoutMs: 1, CreatedAt: time.Now(), HostID: "h"}
		if _, err := db.NewInsert().Model(p).ExcludeColumn("cpu_ms", "peak_memory_bytes", "session", "displays", "owner", "trace_id").Exec(ctx); err != nil { // newer columns
			t.Fatal(err)
		}
	}
	// Something in the way of the second statement: the migration fails.
	if _, err := db.ExecContext(ctx, "CREATE INDEX processes_live_idx ON processes (ref)"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if st, err := Open(ctx, url, ""); err == nil {
		st.Close()
		t.Fatal("the migration went through an index in its way")
	}
	db, _, err := connect(url, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "DROP INDEX processes_live_idx"); err != nil {
		t.Fatal(err)
	}
	db.Close()

	st, err := Open(ctx, url, "")
	if err != nil {
		t.Fatalf("the migration did not apply after a failed attempt: %v", err)
	}
	defer st.Close()
	for _, c := range []struct {
		f    ProcessFilter
		want int
	}{
		{ProcessFilter{State: "running", Limit: 100}, 10},
		{ProcessFilter{State: "queued", Limit: 100}, 10},
		{ProcessFilter{State: "idle", Limit: 100}, 20},
		{ProcessFilter{Ref: "nightly", Limit: 100}, 20},
		{ProcessFilter{Ref: "nightly", State: "queued", Limit: 100}, 10},
	} {
		if ps, err := st.ListProcesses(ctx, c.f); err != nil || len(ps) != c.want {
			t.Errorf("%+v: %d processes, want %d (%v)", c.f, len(ps), c.want, err)
		}
	}
	if n, err := inTx(st, func(tx *Tx) (int64, error) {
		return tx.FinishAll(ctx, "h", []string{"queued", "running"}, "failed", "host_restart", "gone", time.Now())
	}); err != nil || n != 20 {
		t.Errorf("finish all: %d %v", n, err)
	}
}

// handPIDDatabase opens the SQLite database at url as the version that
// gave pids by hand left it: every SQL migration, then its rebuild of the
// processes table without AUTOINCREMENT, with the pid floor a delete
// trigger raises.
func handPIDDatabase(t *testing.T, url string) *bun.DB {
	t.Helper()
	db := oldDatabase(t, url, "~")
	ctx := context.Background()
	var schema string
	if err := db.QueryRowContext(ctx, "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'processes'").Scan(&schema); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, q := range []string{
		"PRAGMA foreign_keys = OFF",
		strings.Replace(strings.Replace(schema, " AUTOINCREMENT", "", 1), "CREATE TABLE processes", "CREATE TABLE processes_rebuilt", 1),
		"INSERT INTO processes_rebuilt SELECT * FROM processes",
		"CREATE TABLE process_pid_floor (one INTEGER PRIMARY KEY CHECK (one = 1), pid BIGINT NOT NULL)",
		"INSERT INTO process_pid_floor (one, pid) VALUES (1, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'processes'), 0))",
		"DROP TABLE processes",
		"ALTER TABLE processes_rebuilt RENAME TO processes",
		"CREATE INDEX processes_ref_idx ON processes (ref, pid) WHERE ref <> ''",
		"CREATE INDEX processes_live_idx ON processes (state, pid) WHERE state <> 'idle' AND state <> 'queued'",
		"CREATE TRIGGER processes_pid_floor AFTER DELETE ON processes BEGIN UPDATE process_pid_floor SET pid = max(pid, OLD.pid); END",
		"PRAGMA foreign_keys = ON",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return db
}

// insertHandPID stores a process as the hand-pid version did: one past the
// largest pid stored and the floor.
func insertHandPID(t *testing.T, db bun.IDB, p *Process) {
	t.Helper()
	_, err := db.NewInsert().Model(p).
		Value("pid", "(SELECT max(coalesce(max(pid), 0), (SELECT pid FROM process_pid_floor)) + 1 FROM processes)").
		Returning("pid").Exec(context.Background())
	if err != nil {
		t.Fatal(err)
	}
}

// TestUpgradeBringsBackAutoincrement: a SQLite database whose pids were
// given by hand keeps its processes, their files and its indexes through
// the rebuild; pids go on past every pid given before (the deleted newest
// one too, which only the floor remembered); foreign keys still cascade;
// and a second run of the rebuild changes nothing.
func TestUpgradeBringsBackAutoincrement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "sqlite://" + t.TempDir() + "/cyrnel.db"
	db := handPIDDatabase(t, url)
	var pids []int64
	for range 3 {
		p := &Process{Code: "x", State: "idle", TimeoutMs: 1, CreatedAt: time.Now(), HostID: "h"}
		insertHandPID(t, db, p)
		pids = append(pids, p.PID)
	}
	file := &ProcessFile{PID: pids[1], Path: "out.csv", Size: 3, ModifiedAt: time.Now(), Content: []byte("a,b")}
	if _, err := db.NewInsert().Model(file).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.NewDelete().Model((*Process)(nil)).Where("pid = ?", pids[2]).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	// A file whose process an operator deleted with foreign keys off.
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	orphan := &ProcessFile{PID: 999, Path: "left.txt", Size: 1, ModifiedAt: time.Now(), Content: []byte("x")}
	if _, err := conn.ExecContext(ctx, "PRAGMA foreign_keys = OFF"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.NewInsert().Model(orphan).Exec(ctx); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	columns, indexes := tableInfo(t, db, "processes"), indexesOf(t, db)
	db.Close()

	st, err := Open(ctx, url, "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var schema string
	if err := st.DB.QueryRowContext(ctx, "SELECT group_concat(sql, ';') FROM sqlite_schema WHERE name IN ('processes', 'process_pid_floor', 'processes_pid_floor')").Scan(&schema); err != nil ||
		!strings.Contains(schema, "AUTOINCREMENT") || strings.Contains(schema, "floor") {
		t.Fatalf("after the upgrade: %q (%v)", schema, err)
	}
	if got := tableInfo(t, st.DB, "processes"); got != columns {
		t.Fatalf("columns after the rebuild and the migrations after it:\n%s\nbefore:\n%s", got, columns)
	}
	if got := indexesOf(t, st.DB); got != indexes {
		t.Fatalf("indexes after the rebuild:\n%s\nbefore:\n%s", got, indexes)
	}
	for _, pid := range pids[:2] {
		if _, err := st.GetProcess(ctx, pid); err != nil {
			t.Errorf("process %d after the upgrade: %v", pid, err)
		}
	}
	for pid, n := range map[int64]int{pids[1]: 1, orphan.PID: 1} {
		if files, err := st.ListProcessFiles(ctx, pid); err != nil || len(files) != n {
			t.Fatalf("files of process %d after the upgrade: %v %v", pid, files, err)
		}
	}
	if pid := newIdleProcess(t, st); pid != pids[2]+1 {
		t.Fatalf("first pid after the upgrade %d, want %d: the deleted %d must not come back", pid, pids[2]+1, pids[2])
	}
	if err := rebuildProcesses(ctx, st.DB); err != nil {
		t.Fatalf("a second rebuild: %v", err)
	}
	if ok, err := inTx(st, func(tx *Tx) (bool, error) { return tx.DeleteProcess(ctx, pids[1], []string{"idle"}) }); !ok || err != nil {
		t.Fatalf("delete %d: %v %v", pids[1], ok, err)
	}
	if files, err := st.ListProcessFiles(ctx, pids[1]); err != nil || len(files) != 0 {
		t.Fatalf("files of deleted process %d: %v %v: the cascade is gone", pids[1], files, err)
	}
}

// TestUpgradeOfAnEmptyHandPIDDatabase: with no process stored, the floor
// alone says which pids were given: the first pid comes after it.
func TestUpgradeOfAnEmptyHandPIDDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := "sqlite://" + t.TempDir() + "/cyrnel.db"
	db := handPIDDatabase(t, url)
	for range 2 {
		p := &Process{Code: "x", State: "idle", TimeoutMs: 1, CreatedAt: time.Now(), HostID: "h"}
		insertHandPID(t, db, p)
	}
	if _, err := db.NewDelete().Model((*Process)(nil)).Where("TRUE").Exec(ctx); err != nil {
		t.Fatal(err)
	}
	db.Close()
	st, err := Open(ctx, url, "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if pid := newIdleProcess(t, st); pid != 3 {
		t.Fatalf("first pid after the upgrade %d, want 3", pid)
	}
}

// TestUpgradeWithoutRoomLosesNothing: a SQLite database with no room for
// the copy of its processes refuses the upgrade as full, stays as it was,
// and upgrades once it has room.
func TestUpgradeWithoutRoomLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := t.TempDir() + "/cyrnel.db"
	db := handPIDDatabase(t, "sqlite://"+path)
	for range 20 {
		p := &Process{Code: "x", State: "idle", Stdout: strings.Repeat("o", 64<<10), TimeoutMs: 1, CreatedAt: time.Now(), HostID: "h"}
		insertHandPID(t, db, p)
	}
	var pages int64
	if err := db.QueryRowContext(ctx, "PRAGMA page_count").Scan(&pages); err != nil {
		t.Fatal(err)
	}
	db.Close()
	capped := fmt.Sprintf("sqlite://%s?_pragma=max_page_count(%d)", path, pages+16)
	if st, err := Open(ctx, capped, ""); !errors.Is(err, ErrFull) {
		if st != nil {
			st.Close()
		}
		t.Fatalf("upgrade without room: %v, want ErrFull", err)
	}
	st, err := Open(ctx, "sqlite://"+path, "")
	if err != nil {
		t.Fatalf("upgrade with room: %v", err)
	}
	defer st.Close()
	if ps, err := st.ListProcesses(ctx, ProcessFilter{Limit: 100}); err != nil || len(ps) != 20 {
		t.Fatalf("%d processes after the upgrade (%v), want 20", len(ps), err)
	}
	if pid := newIdleProcess(t, st); pid != 21 {
		t.Fatalf("first pid after the upgrade %d, want 21", pid)
	}
}

// indexesOf lists the processes table's indexes as SQLite stores them.
func indexesOf(t *testing.T, db bun.IDB) string {
	t.Helper()
	var s string
	if err := db.QueryRowContext(context.Background(),
		"SELECT group_concat(sql, ';\n') FROM (SELECT sql FROM sqlite_schema WHERE tbl_name = 'processes' AND type = 'index' AND sql IS NOT NULL ORDER BY name)").Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// tableInfo describes the columns of a SQLite table, in order: name, type,
// NOT NULL, default, and primary key.
func tableInfo(t *testing.T, db bun.IDB, table string) string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT name, type, "notnull", coalesce(dflt_value, ''), pk FROM pragma_table_info(?)`, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var name, typ, dflt string
		var notNull, pk int
		if err := rows.Scan(&name, &typ, &notNull, &dflt, &pk); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %s notnull=%d default=%q pk=%d\n", name, typ, notNull, dflt, pk)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestMigrationNamesAreUnique: a Go migration named like a SQL one would
// count as applied wherever the SQL one ran, and never run there.
func TestMigrationNamesAreUnique(t *testing.T) {
	t.Parallel()
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if name, _, _ := strings.Cut(e.Name(), "_"); name == processesWithAutoincrement.Name {
			t.Errorf("the Go migration %s has the name of %s", processesWithAutoincrement.Name, e.Name())
		}
	}
}
