// Package datadir owns the host's data directory: one host at a time (an
// exclusive lock), and a stable host id that marks the processes it runs.
package datadir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// ErrInUse is returned when another host holds the data directory.
var ErrInUse = errors.New("data directory is in use by another cyrnel host")

// Dir is a locked data directory.
type Dir struct {
	Path   string
	HostID string
	// Used says a host ran on the directory before (its host id existed):
	// an empty database there is lost data, not a first start.
	Used bool
	lock *os.File
}

// Open creates (0700) and locks dir, and reads or makes its host id. The
// lock is released by Close, or by the kernel when the process dies.
func Open(dir string) (*Dir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "cyrnel.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s (stop it, or use another --data-dir)", ErrInUse, dir)
		}
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	id, used, err := hostID(filepath.Join(dir, "host.id"))
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Dir{Path: dir, HostID: id, Used: used, lock: f}, nil
}

// hostID reads or makes the host id; existed says it was there.
func hostID(path string) (id string, existed bool, err error) {
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), true, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", false, fmt.Errorf("read host id: %w", err)
	}
	raw := make([]byte, 8)
	if _, err := rand.Read(raw); err != nil {
		return "", false, fmt.Errorf("make host id: %w", err)
	}
	id = hex.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", false, fmt.Errorf("write host id: %w", err)
	}
	return id, false, nil
}

// Announce records the URL a server on this directory listens on, in the
// lock file, for the CLI's commands that would otherwise open the directory
// themselves (Running).
func (d *Dir) Announce(url string) error {
	if err := d.lock.Truncate(0); err != nil {
		return fmt.Errorf("announce address: %w", err)
	}
	if _, err := d.lock.WriteAt([]byte(url+"\n"), 0); err != nil {
		return fmt.Errorf("announce address: %w", err)
	}
	return nil
}

// Running returns the URL announced by the server holding the data
// directory dir, or "" when no host holds it. A host that holds it without
// announcing (another CLI command's embedded host) is ErrInUse.
func Running(dir string) (string, error) {
	f, err := os.Open(filepath.Join(dir, "cyrnel.lock"))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("data dir lock: %w", err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err == nil {
		// Nobody holds it. Unlocked, not only closed: see Close.
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return "", nil
	} else if !errors.Is(err, syscall.EWOULDBLOCK) {
		return "", fmt.Errorf("data dir lock: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, 1024))
	if err != nil {
		return "", fmt.Errorf("data dir lock: %w", err)
	}
	url := strings.TrimSpace(string(b))
	if url == "" {
		return "", fmt.Errorf("%w: %s", ErrInUse, dir)
	}
	return url, nil
}

// Close releases the lock. It unlocks before it closes: a flock belongs to
// the open file, which a child forked by another goroutine shares until it
// execs (the descriptor is close-on-exec), so closing alone could leave the
// directory locked for that long — a restart on it then found it in use.
func (d *Dir) Close() error {
	_ = d.lock.Truncate(0) // best effort: a stale address is ignored once the lock is free
	if err := syscall.Flock(int(d.lock.Fd()), syscall.LOCK_UN); err != nil {
		d.lock.Close()
		return fmt.Errorf("unlock data dir: %w", err)
	}
	return d.lock.Close()
}
