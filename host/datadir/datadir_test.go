package datadir

import (
	"errors"
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
