package store

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/uptrace/bun"
	"github.com/uptrace/bun/driver/sqliteshim"
)

// TestPruneProcessesOnEveryDialect: the age bound drops finished processes
// finished before it, the size bound the oldest finished ones past it, files
// counted and dropped with them; live processes stay whatever their age or
// size (the controls: what is within the bounds stays).
func TestPruneProcessesOnEveryDialect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			old := time.Now().Add(-48 * time.Hour)
			oldIdle := addProcess(t, st, "idle", old, "", 0)
			oldLive := addProcess(t, st, "running", old, strings.Repeat("y", 3000), 0)
			withFile := addProcess(t, st, "idle", time.Now(), "", 5000)
			newest := addProcess(t, st, "idle", time.Now(), strings.Repeat("z", 1000), 0)

			n := prune(t, st, 0, time.Now().Add(-24*time.Hour), 100)
			if n != 1 {
				t.Fatalf("prune by age: %d", n)
			}
			// Newest first: 1001 bytes (kept), then 5001 with its file
			// (6002 > 5000: pruned), then the live one (kept all the same).
			if n := prune(t, st, 5000, time.Time{}, 100); n != 1 {
				t.Fatalf("prune by size: %d", n)
			}
			for pid, want := range map[int64]bool{oldIdle: false, oldLive: true, withFile: false, newest: true} {
				_, err := st.GetProcess(ctx, pid)
				if (err == nil) != want {
					t.Errorf("process %d: kept %v, want %v (%v)", pid, err == nil, want, err)
				}
			}
			var files int
			if err := st.DB.NewSelect().Model((*ProcessFile)(nil)).ColumnExpr("count(*)").Scan(ctx, &files); err != nil || files != 0 {
				t.Fatalf("files left: %d %v", files, err)
			}
		})
	}
}

// addProcess stores a process in state, created (and, idle, finished) at
// at, with stdout and a file of that many bytes (0: none), and returns its
// pid.
func addProcess(t *testing.T, st *Store, state string, at time.Time, stdout string, file int) int64 {
	t.Helper()
	ctx := context.Background()
	p := &Process{Code: "x", State: state, TimeoutMs: 1, CreatedAt: at, HostID: "h", Stdout: stdout}
	if state == "idle" {
		p.FinishedAt = &at
	}
	write(t, st, func(tx *Tx) error { return tx.InsertProcess(ctx, p) })
	if file > 0 {
		write(t, st, func(tx *Tx) error {
			return tx.ReplaceProcessFiles(ctx, p.PID, []ProcessFile{{PID: p.PID, Path: "f", Size: int64(file), ModifiedAt: at}}, func(int) io.Reader { return bytes.NewReader(make([]byte, file)) })
		})
	}
	return p.PID
}

// prune finds the cut for maxBytes and before and deletes up to it in
// batches of limit, each batch at most limit; it returns how many went.
func prune(t *testing.T, st *Store, maxBytes int64, before time.Time, limit int64) int64 {
	t.Helper()
	ctx := context.Background()
	cut, err := st.RetentionCut(ctx, maxBytes, before)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for {
		k, err := inTx(st, func(tx *Tx) (int64, error) { return tx.PruneProcesses(ctx, cut, limit) })
		if err != nil {
			t.Fatal(err)
		}
		if k > limit {
			t.Fatalf("a batch of %d deleted %d", limit, k)
		}
		if n += k; k < limit {
			return n
		}
	}
}

// TestRetentionCountsBytesInBatches: past the age bound go the oldest in
// batches of at most the limit, a live one among them and a newer one (the
// controls) staying; the size bound counts bytes, not characters (3,000
// two-byte characters are 6,000 bytes: past a bound of 4,000, though their
// 3,001 characters would fit).
func TestRetentionCountsBytesInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			old := time.Now().Add(-72 * time.Hour)
			var gone []int64
			for i := range 7 {
				if i == 3 {
					addProcess(t, st, "running", old, "", 0)
				}
				gone = append(gone, addProcess(t, st, "idle", old, "", 0))
			}
			recent := addProcess(t, st, "idle", time.Now(), "", 0)
			cut, err := st.RetentionCut(ctx, 0, time.Now().Add(-24*time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			var batches []int64
			for {
				k, err := inTx(st, func(tx *Tx) (int64, error) { return tx.PruneProcesses(ctx, cut, 3) })
				if err != nil {
					t.Fatal(err)
				}
				if batches = append(batches, k); k < 3 {
					break
				}
			}
			if !slices.Equal(batches, []int64{3, 3, 1}) {
				t.Fatalf("batches %v, want [3 3 1]", batches)
			}
			for _, pid := range gone {
				if _, err := st.GetProcess(ctx, pid); err == nil {
					t.Fatalf("process %d past the age bound was kept", pid)
				}
			}
			if _, err := st.GetProcess(ctx, recent); err != nil {
				t.Fatalf("the recent one, within the bound: %v", err)
			}

			wide := addProcess(t, st, "idle", time.Now(), strings.Repeat("é", 3000), 0)
			small := addProcess(t, st, "idle", time.Now(), "", 0)
			// Newest first: 1 byte, then 6,001 (past 4,000: pruned, and the
			// older idle one with it; the live one stays).
			if n := prune(t, st, 4000, time.Time{}, 10); n != 2 {
				t.Fatalf("prune by size: %d", n)
			}
			for _, pid := range []int64{wide, recent} {
				if _, err := st.GetProcess(ctx, pid); err == nil {
					t.Fatalf("process %d past the size bound was kept", pid)
				}
			}
			if _, err := st.GetProcess(ctx, small); err != nil {
				t.Fatalf("the newest, within the bound: %v", err)
			}

			ps, err := st.ListProcesses(ctx, ProcessFilter{Limit: 10})
			if err != nil || len(ps) != 2 || ps[0].PID != small || ps[1].State != "running" {
				t.Fatalf("left %d (%v), want the small and the live one", len(ps), err)
			}
		})
	}
}

// TestRetentionCutStopsAtItsSnapshot: a process stored after the cut was
// read is not the round's, even where every process the cut saw is past a
// bound (a newest one larger than the size bound alone; every one created
// before the age bound); the controls, those the cut saw, go.
func TestRetentionCutStopsAtItsSnapshot(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			old := time.Now().Add(-72 * time.Hour)
			for _, c := range []struct {
				name     string
				maxBytes int64
				before   time.Time
			}{
				{"size", 4000, time.Time{}},
				{"age", 0, time.Now().Add(-24 * time.Hour)},
			} {
				seen := addProcess(t, st, "idle", old, strings.Repeat("y", 6000), 0)
				cut, err := st.RetentionCut(ctx, c.maxBytes, c.before)
				if err != nil {
					t.Fatal(err)
				}
				late := addProcess(t, st, "idle", old, "", 0)
				if n, err := inTx(st, func(tx *Tx) (int64, error) { return tx.PruneProcesses(ctx, cut, 10) }); err != nil || n != 1 {
					t.Fatalf("%s: pruned %d (%v), want the one the cut saw", c.name, n, err)
				}
				if _, err := st.GetProcess(ctx, seen); err == nil {
					t.Fatalf("%s: the process the cut saw was kept", c.name)
				}
				if _, err := st.GetProcess(ctx, late); err != nil {
					t.Fatalf("%s: a process stored after the cut was pruned: %v", c.name, err)
				}
				write(t, st, func(tx *Tx) error { _, err := tx.DeleteProcess(ctx, late, []string{"idle"}); return err })
			}
		})
	}
}

// TestPruningReadsOnlyThePrunedRange: a batch reads the range of pids
// below the cut by the primary key, not the whole table: its cost is what
// it deletes. The control: a select without the range scans the table.
func TestPruningReadsOnlyThePrunedRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openSQLite(t)
	plan := func(q *bun.SelectQuery) string {
		rows, err := st.DB.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q.String())
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var steps []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			steps = append(steps, detail)
		}
		return strings.Join(steps, "; ")
	}
	cut := RetentionCut{SizeBelow: 10, AgeBelow: 20, Before: time.Now()}
	if got := plan(pastRetention(st.DB, cut, 500)); !strings.Contains(got, "SEARCH") || !strings.Contains(got, "rowid<?") {
		t.Fatalf("a batch's plan %q does not search the pids below the cut", got)
	}
	all := st.DB.NewSelect().Model((*Process)(nil)).Column("pid").Where("state = 'idle'").Order("pid").Limit(500)
	if got := plan(all); !strings.Contains(got, "SCAN") {
		t.Fatalf("control: %q", got)
	}
}

// TestReclaimShrinksTheFile: deleted rows' room goes back to the file
// system (incremental auto_vacuum), every free page of it though they are
// more than one chunk; the control: before Reclaim the file keeps its size.
func TestReclaimShrinksTheFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	st, err := Open(ctx, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var pids []int64
	for range 100 { // 10 MB: more free pages than one chunk of Reclaim's
		p := &Process{Code: strings.Repeat("c", 100<<10), State: "idle", TimeoutMs: 1, CreatedAt: time.Now(), HostID: "h"}
		write(t, st, func(tx *Tx) error { return tx.InsertProcess(ctx, p) })
		pids = append(pids, p.PID)
	}
	size := func() int64 {
		if _, err := st.DB.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(dir, sqliteFile))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	full := size()
	for _, pid := range pids {
		write(t, st, func(tx *Tx) error { _, err := tx.DeleteProcess(ctx, pid, []string{"idle"}); return err })
	}
	if got := size(); got < full {
		t.Fatalf("control: the file shrank before Reclaim (%d -> %d)", full, got)
	}
	if err := st.Reclaim(ctx); err != nil {
		t.Fatal(err)
	}
	if got := size(); got > full/4 {
		t.Fatalf("after Reclaim the file is %d bytes of %d", got, full)
	}
	var free int
	if err := st.DB.QueryRowContext(ctx, "PRAGMA freelist_count").Scan(&free); err != nil || free != 0 {
		t.Fatalf("after Reclaim %d pages are still free (%v)", free, err)
	}
}

// TestReclaimEndsWhereNothingCanBeGivenBack: a database left without
// incremental auto_vacuum (its conversion found no room) keeps its free
// pages, and Reclaim ends instead of asking again and again until its
// context ends; the control: the free pages are there.
func TestReclaimEndsWhereNothingCanBeGivenBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openSQLite(t)
	conn, err := st.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range []string{"PRAGMA journal_mode = DELETE", "PRAGMA auto_vacuum = NONE", "VACUUM", "PRAGMA journal_mode = WAL"} {
		if _, err := conn.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	conn.Close()
	pid := addProcess(t, st, "idle", time.Now(), strings.Repeat("c", 1<<20), 0)
	write(t, st, func(tx *Tx) error { _, err := tx.DeleteProcess(ctx, pid, []string{"idle"}); return err })
	free := func() int {
		var n int
		if err := st.DB.QueryRowContext(ctx, "PRAGMA freelist_count").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := st.DB.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	if n := free(); n == 0 {
		t.Fatal("control: no free pages after the delete")
	}
	bounded, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := st.Reclaim(bounded); err != nil {
		t.Fatalf("Reclaim: %v", err)
	}
	if n := free(); n == 0 {
		t.Fatal("free pages given back without incremental auto_vacuum")
	}
}

// TestOpenConvertsToIncrementalVacuum: a database made without auto_vacuum
// is converted at Open.
func TestOpenConvertsToIncrementalVacuum(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sql.Open(sqliteshim.ShimName, "file:"+filepath.Join(dir, sqliteFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE old (x)"); err != nil {
		t.Fatal(err)
	}
	var mode int
	if err := db.QueryRowContext(ctx, "PRAGMA auto_vacuum").Scan(&mode); err != nil || mode != 0 {
		t.Fatalf("control: a database made without auto_vacuum has mode %d (%v)", mode, err)
	}
	db.Close()
	st, err := Open(ctx, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.DB.QueryRowContext(ctx, "PRAGMA auto_vacuum").Scan(&mode); err != nil || mode != 2 {
		t.Fatalf("after Open: mode %d (%v)", mode, err)
	}
}
