package store

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenRefusesALostDatabase: an empty database in a data directory a
// host used before is refused (ErrEmpty) instead of silently starting
// afresh; a damaged one says it is corrupt.
func TestOpenRefusesALostDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	used := func(t *testing.T) string {
		t.Helper()
		dir := t.TempDir()
		s, err := Open(ctx, "", dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	db := func(dir string) string { return filepath.Join(dir, sqliteFile) }

	t.Run("empty", func(t *testing.T) {
		t.Parallel()
		dir := used(t)
		if err := os.Truncate(db(dir), 0); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(ctx, "", dir, Options{UsedDataDir: true}); !errors.Is(err, ErrEmpty) {
			t.Fatalf("empty database in a used data dir: %v", err)
		}
		// Control: on a first start the same empty file is a new database.
		s, err := Open(ctx, "", dir, Options{UsedDataDir: false})
		if err != nil {
			t.Fatalf("first start: %v", err)
		}
		s.Close()
	})
	t.Run("garbage", func(t *testing.T) {
		t.Parallel()
		dir := used(t)
		junk := make([]byte, 64<<10)
		rand.Read(junk)
		if err := os.WriteFile(db(dir), junk, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(ctx, "", dir, Options{UsedDataDir: true}); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "corrupt") {
			t.Fatalf("garbage: %v", err)
		}
	})
	t.Run("damaged pages", func(t *testing.T) {
		t.Parallel()
		dir := used(t)
		f, err := os.OpenFile(db(dir), os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		junk := make([]byte, 8<<10)
		rand.Read(junk)
		// Past the 100-byte header: the file is still "a database", its
		// schema pages are not.
		if _, err := f.WriteAt(junk, 200); err != nil {
			t.Fatal(err)
		}
		f.Close()
		if _, err := Open(ctx, "", dir, Options{UsedDataDir: true}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("damaged pages: %v", err)
		}
	})
}
