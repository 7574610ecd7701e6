package store

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// filled returns a data directory whose database holds a table of large
// rows (overflow pages at the end of the file), closed.
func filled(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, "", dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB.ExecContext(ctx, "CREATE TABLE junk (b BLOB)"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		if _, err := s.DB.ExecContext(ctx, "INSERT INTO junk (b) VALUES (?)", bytes.Repeat([]byte{byte(i)}, 64<<10)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// damage overwrites the start of the file's last pages: the junk rows'
// overflow pages, whose first bytes point to the next one.
func damage(t *testing.T, dir string) {
	t.Helper()
	path := filepath.Join(dir, sqliteFile)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	for off := fi.Size() - 40*4096; off < fi.Size(); off += 4096 {
		if _, err := f.WriteAt([]byte{0xA5, 0xA5, 0xA5, 0xA5}, off); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpenFindsADamagedDataPage: a page no migration reads is found at
// Open, which names the file; the control: undamaged, the same database
// opens.
func TestOpenFindsADamagedDataPage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filled(t)
	s, err := Open(ctx, "", dir, Options{UsedDataDir: true})
	if err != nil {
		t.Fatalf("control: the undamaged database: %v", err)
	}
	s.Close()
	damage(t, dir)
	_, err = Open(ctx, "", dir, Options{UsedDataDir: true})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), filepath.Join(dir, sqliteFile)) {
		t.Fatalf("want ErrCorrupt naming the file, got %v", err)
	}
}

// TestHealthyAfterAStatementFindsDamage: a page damaged while the host runs
// is reported by Healthy once a statement reads it; before that (the
// control) Healthy is nil.
func TestHealthyAfterAStatementFindsDamage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filled(t)
	s, err := Open(ctx, "", dir, Options{UsedDataDir: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Healthy(ctx); err != nil {
		t.Fatalf("control: healthy before any damage: %v", err)
	}
	// A fresh connection, with none of the pages Open's check read cached:
	// what a host finds once its cache has moved on.
	s.DB.SetMaxIdleConns(0)
	damage(t, dir)
	var n int64
	err = s.DB.NewSelect().Table("junk").ColumnExpr("sum(length(hex(b)))").Scan(ctx, &n)
	if err == nil {
		t.Fatalf("reading the damaged rows succeeded (%d bytes): the test damaged nothing", n)
	}
	if err := s.Healthy(ctx); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("after a statement found the damage: %v", err)
	}
}
