// Package datadir owns the host's data directory: one host at a time (an
// exclusive lock), and a stable host id that marks the processes it runs.
package datadir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
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
	lock   *os.File
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
	id, err := hostID(filepath.Join(dir, "host.id"))
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Dir{Path: dir, HostID: id, lock: f}, nil
}

func hostID(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read host id: %w", err)
	}
	raw := make([]byte, 8)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("make host id: %w", err)
	}
	id := hex.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write host id: %w", err)
	}
	return id, nil
}

// Close releases the lock.
func (d *Dir) Close() error { return d.lock.Close() }
