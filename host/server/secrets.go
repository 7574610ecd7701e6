package server

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/cyrnel/cyrnel/host/secrets"
	"github.com/cyrnel/cyrnel/host/store"
)

// keyCheckSetting holds, on PostgreSQL, a value sealed with the secrets key
// of the first host on the database: before any secret is stored it is what
// proves that every host shares one key.
const keyCheckSetting = "secrets_key_check"

// openSecrets loads the secrets key and proves it opens what the database
// holds: every stored secret and, with several hosts, the key check. A
// missing key file is never silently replaced while there is something it
// sealed, and a key that opens nothing stops the start, naming where it came
// from.
func openSecrets(ctx context.Context, log *slog.Logger, st *store.Store, encoded, dataDir string) (*secrets.Box, error) {
	sealed, err := st.SealedSecrets(ctx)
	if err != nil {
		return nil, err
	}
	check, checked := "", false
	if !st.Local() {
		if check, checked, err = st.Setting(ctx, keyCheckSetting); err != nil {
			return nil, err
		}
	}
	key, err := secrets.LoadKey(log, encoded, dataDir, checked || len(sealed) > 0)
	if err != nil {
		return nil, err
	}
	box, err := secrets.New(key)
	if err != nil {
		return nil, err
	}
	source := "the key file " + filepath.Join(dataDir, secrets.KeyFile)
	if encoded != "" {
		source = "CYRNEL_SECRETS_KEY (or CYRNEL_SECRETS_KEY_FILE)"
	}
	for _, s := range sealed {
		if _, err := box.Open(s); err != nil {
			return nil, fmt.Errorf("the secrets key from %s cannot open the %d secrets stored in this database: start with the key they were sealed with", source, len(sealed))
		}
	}
	if st.Local() {
		return box, nil
	}
	if !checked {
		fresh, err := box.Seal(map[string]any{"cyrnel": "secrets key check"})
		if err != nil {
			return nil, err
		}
		// The first host to store it wins; the others check against it.
		if check, err = st.FirstSetting(ctx, keyCheckSetting, base64.StdEncoding.EncodeToString(fresh)); err != nil {
			return nil, err
		}
	}
	raw, err := base64.StdEncoding.DecodeString(check)
	if err != nil {
		return nil, fmt.Errorf("setting %s: %w", keyCheckSetting, err)
	}
	if _, err := box.Open(raw); err != nil {
		return nil, fmt.Errorf("the secrets key from %s cannot open the secrets other hosts stored in this database: share one CYRNEL_SECRETS_KEY (or CYRNEL_SECRETS_KEY_FILE) between every host", source)
	}
	return box, nil
}
