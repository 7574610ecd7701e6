package secrets

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSealOpen(t *testing.T) {
	t.Parallel()
	key, err := LoadKey(slog.New(slog.NewTextHandler(io.Discard, nil)), "", t.TempDir(), false)
	if err != nil {
		t.Fatal(err)
	}
	box, err := New(key)
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]any{"token": "s3cr3t-value"}
	a, _ := box.Seal(in)
	b, _ := box.Seal(in)
	if bytes.Equal(a, b) {
		t.Fatal("two seals of the same value are equal: nonce reused")
	}
	if bytes.Contains(a, []byte("s3cr3t-value")) {
		t.Fatal("sealed value contains the plaintext")
	}
	out, err := box.Open(a)
	if err != nil || out["token"] != "s3cr3t-value" {
		t.Fatalf("open: %v %v", out, err)
	}
	a[len(a)-1] ^= 1
	if _, err := box.Open(a); err == nil {
		t.Fatal("tampered value opened")
	}
}

func TestKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	k1, err := LoadKey(log, "", dir, false)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, KeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	k2, err := LoadKey(log, "", dir, false)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatal("key not reloaded from file")
	}
	k3, err := LoadKey(log, base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32)), dir, false)
	if err != nil || k3[0] != 7 {
		t.Fatalf("env key: %v", err)
	}
	if _, err := LoadKey(log, "c2hvcnQ=", dir, false); err == nil {
		t.Fatal("short key accepted")
	}
}

// TestKeyFileMissingWithSealedSecrets: without a key file, a caller that holds
// sealed secrets gets ErrKeyMissing naming the file, and no key is made.
func TestKeyFileMissingWithSealedSecrets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, err := LoadKey(log, "", dir, true)
	if !errors.Is(err, ErrKeyMissing) || !strings.Contains(err.Error(), filepath.Join(dir, KeyFile)) {
		t.Fatalf("want ErrKeyMissing naming the file, got %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, KeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a key file was made: %v", err)
	}
}
