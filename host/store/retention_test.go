package store

import (
	"bytes"
	"context"
	"database/sql"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
			add := func(state string, finished time.Time, stdout string, file int) int64 {
				p := &Process{Code: "x", State: state, TimeoutMs: 1, CreatedAt: finished, HostID: "h", Stdout: stdout}
				if state == "idle" {
					p.FinishedAt = &finished
				}
				write(t, st, func(tx *Tx) error { return tx.InsertProcess(ctx, p) })
				if file > 0 {
					write(t, st, func(tx *Tx) error {
						return tx.ReplaceProcessFiles(ctx, p.PID, []ProcessFile{{PID: p.PID, Path: "f", Size: int64(file), ModifiedAt: finished}}, func(int) io.Reader { return bytes.NewReader(make([]byte, file)) })
					})
				}
				return p.PID
			}
			oldIdle := add("idle", old, "", 0)
			oldLive := add("running", old, strings.Repeat("y", 3000), 0)
			withFile := add("idle", time.Now(), "", 5000)
			newest := add("idle", time.Now(), strings.Repeat("z", 1000), 0)

			n, err := inTx(st, func(tx *Tx) (int64, error) { return tx.PruneProcesses(ctx, 0, time.Now().Add(-24*time.Hour)) })
			if err != nil || n != 1 {
				t.Fatalf("prune by age: %d %v", n, err)
			}
			// Newest first: 1001 bytes (kept), then 5001 with its file
			// (6002 > 5000: pruned), then the live one (kept all the same).
			n, err = inTx(st, func(tx *Tx) (int64, error) { return tx.PruneProcesses(ctx, 5000, time.Time{}) })
			if err != nil || n != 1 {
				t.Fatalf("prune by size: %d %v", n, err)
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

// TestReclaimShrinksTheFile: deleted rows' room goes back to the file
// system (incremental auto_vacuum); the control: before Reclaim the file
// keeps its size.
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
	for range 20 {
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
