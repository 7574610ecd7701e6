// Package secrets seals values at rest with AES-256-GCM, a fresh random nonce
// per write.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// KeyFile is the generated key's name in the data directory.
const KeyFile = "secrets.key"

// Box seals and opens secrets.
type Box struct {
	aead cipher.AEAD
}

// New returns a box for a 32-byte key.
func New(key []byte) (*Box, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("secrets key must be 32 bytes, got %d", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	return &Box{aead: aead}, nil
}

// ErrKeyMissing is returned by LoadKey when the key file is gone but the
// caller holds secrets sealed with it: a new key would open none of them.
var ErrKeyMissing = errors.New("the secrets key file is missing")

// LoadKey returns the key from encoded (base64, as in CYRNEL_SECRETS_KEY) or,
// when that is empty, from the key file in dataDir. Without a file it
// generates one (mode 0600) with a warning, unless sealed says secrets were
// sealed already (ErrKeyMissing, naming the file): a key next to the data it
// protects only guards against leaks of the database alone.
func LoadKey(log *slog.Logger, encoded, dataDir string, sealed bool) ([]byte, error) {
	if encoded != "" {
		key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(encoded))
		if err != nil {
			return nil, fmt.Errorf("CYRNEL_SECRETS_KEY is not base64: %w", err)
		}
		if len(key) != 32 {
			return nil, fmt.Errorf("CYRNEL_SECRETS_KEY must decode to 32 bytes, got %d", len(key))
		}
		return key, nil
	}
	path := filepath.Join(dataDir, KeyFile)
	b, err := os.ReadFile(path)
	if err == nil {
		key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
		if err != nil || len(key) != 32 {
			return nil, fmt.Errorf("secrets key file %s is corrupt", path)
		}
		return key, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read secrets key: %w", err)
	}
	if sealed {
		return nil, fmt.Errorf("%w: %s, but the database holds secrets sealed with it: restore the file (or set CYRNEL_SECRETS_KEY to the key); a new key would open none of them", ErrKeyMissing, path)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate secrets key: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("write secrets key: %w", err)
	}
	if _, err := f.WriteString(base64.StdEncoding.EncodeToString(key) + "\n"); err != nil {
		f.Close()
		return nil, fmt.Errorf("write secrets key: %w", err)
	}
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("write secrets key: %w", err)
	}
	log.Warn("CYRNEL_SECRETS_KEY is not set: generated a key file next to the data; set CYRNEL_SECRETS_KEY to keep the key elsewhere", "path", path)
	return key, nil
}

// Seal encrypts a JSON object; nil seals to nil.
func (b *Box) Seal(v map[string]any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	plain, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("seal secrets: %w", err)
	}
	nonce := make([]byte, b.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("seal secrets: %w", err)
	}
	return b.aead.Seal(nonce, nonce, plain, nil), nil
}

// Open decrypts what Seal produced; nil opens to an empty object.
func (b *Box) Open(sealed []byte) (map[string]any, error) {
	out := map[string]any{}
	if len(sealed) == 0 {
		return out, nil
	}
	n := b.aead.NonceSize()
	if len(sealed) < n {
		return nil, errors.New("open secrets: sealed value too short")
	}
	plain, err := b.aead.Open(nil, sealed[:n], sealed[n:], nil)
	if err != nil {
		return nil, fmt.Errorf("open secrets (wrong CYRNEL_SECRETS_KEY?): %w", err)
	}
	if err := json.Unmarshal(plain, &out); err != nil {
		return nil, fmt.Errorf("open secrets: %w", err)
	}
	return out, nil
}

// SetPaths lists the JSON pointers of the leaves that are set in v: what
// the API shows of secrets instead of their values.
func SetPaths(v map[string]any) []string {
	out := []string{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if obj, ok := v.(map[string]any); ok && len(obj) > 0 {
			for k, sub := range obj {
				walk(prefix+"/"+k, sub)
			}
			return
		}
		if v != nil {
			out = append(out, prefix)
		}
	}
	for k, sub := range v {
		walk("/"+k, sub)
	}
	sort.Strings(out)
	return out
}
