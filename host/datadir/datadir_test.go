package datadir

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
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

// TestCloseUnlocksWhatAChildShares: the lock's descriptor is close-on-exec,
// and a process that still holds a copy of it when the host closes (a child
// forked by another goroutine, before its exec) does not keep the data
// directory locked: a restart on it succeeds at once.
func TestCloseUnlocksWhatAChildShares(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if flags, err := unix.FcntlInt(a.lock.Fd(), unix.F_GETFD, 0); err != nil || flags&unix.FD_CLOEXEC == 0 {
		t.Fatalf("the lock's descriptor is inherited across exec (flags %#x, %v)", flags, err)
	}
	child := exec.Command("cat") // lives until its stdin closes
	child.ExtraFiles = []*os.File{a.lock}
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		if err := child.Wait(); err != nil {
			t.Error(err)
		}
	}()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir)
	if err != nil {
		t.Fatalf("open after close while a child holds the old descriptor: %v", err)
	}
	b.Close()
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
