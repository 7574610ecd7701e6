package datadir

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOneHostPerDataDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(dir); !errors.Is(err, ErrInUse) {
		t.Fatalf("second open: %v", err)
	}
	id := a.HostID
	a.Close()
	b, err := Open(dir)
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	defer b.Close()
	if b.HostID != id || len(id) != 16 {
		t.Fatalf("host id %q then %q", id, b.HostID)
	}
}

func TestUsedAndAnnounced(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if url, err := Running(dir); url != "" || err != nil {
		t.Fatalf("nothing there: %q %v", url, err)
	}
	a, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if a.Used {
		t.Fatal("a fresh directory counts as used")
	}
	// Held by a host that did not announce itself (a CLI's embedded host).
	if _, err := Running(dir); !errors.Is(err, ErrInUse) {
		t.Fatalf("held, unannounced: %v", err)
	}
	if err := a.Announce("http://127.0.0.1:1234"); err != nil {
		t.Fatal(err)
	}
	if url, err := Running(dir); url != "http://127.0.0.1:1234" || err != nil {
		t.Fatalf("announced: %q %v", url, err)
	}
	a.Close()
	if url, err := Running(dir); url != "" || err != nil {
		t.Fatalf("after close: %q %v", url, err)
	}
	b, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !b.Used {
		t.Fatal("a directory opened before is not marked used")
	}
}

func TestAPIKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	d, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	key, created, err := d.APIKey()
	if err != nil || !created || len(key) != 43 {
		t.Fatalf("first: %q %v %v", key, created, err)
	}
	fi, err := os.Stat(filepath.Join(dir, APIKeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode: %v %v", fi, err)
	}
	again, created, err := d.APIKey()
	if again != key || created || err != nil {
		t.Fatalf("second: %q %v %v", again, created, err)
	}
	if err := os.Chmod(filepath.Join(dir, APIKeyFile), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadAPIKey(dir); err == nil || !strings.Contains(err.Error(), "readable by other users") {
		t.Fatalf("group-readable key: %v", err)
	}
}
