package datadir

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// APIKeyFile is the file, in the data directory, that holds the API key a
// server made for itself when none was configured (DESIGN §11).
const APIKeyFile = "api-key"

// APIKey returns the data directory's API key, creating it (random, URL-safe,
// mode 0600) on first use. created says it was made now.
func (d *Dir) APIKey() (key string, created bool, err error) {
	path := filepath.Join(d.Path, APIKeyFile)
	key, err = ReadAPIKey(d.Path)
	if err == nil || !errors.Is(err, os.ErrNotExist) {
		return key, false, err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", false, fmt.Errorf("make api key: %w", err)
	}
	key = base64.RawURLEncoding.EncodeToString(raw)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", false, fmt.Errorf("write api key: %w", err)
	}
	if _, err := f.WriteString(key + "\n"); err != nil {
		f.Close()
		return "", false, fmt.Errorf("write api key: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", false, fmt.Errorf("write api key: %w", err)
	}
	return key, true, nil
}

// ReadAPIKey reads the API key file of the data directory dir. A key file
// others can read is refused: the key would already be theirs.
func ReadAPIKey(dir string) (string, error) {
	path := filepath.Join(dir, APIKeyFile)
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("api key: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("api key: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("api key file %s is readable by other users (mode %v): make a new one (rm it) or chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, 1024))
	if err != nil {
		return "", fmt.Errorf("api key %s: %w", path, err)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("api key file %s is empty", path)
	}
	return key, nil
}
