package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
)

type setting struct {
	bun.BaseModel `bun:"table:settings"`
	Key           string `bun:"key,pk"`
	Value         string `bun:"value,notnull"`
}

// Setting reads a host setting; ok is false when it was never set.
func (s *Store) Setting(ctx context.Context, key string) (value string, ok bool, err error) {
	var st setting
	err = s.DB.NewSelect().Model(&st).Where("key = ?", key).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read setting %s: %w", key, err)
	}
	return st.Value, true, nil
}

// SetSetting writes a host setting.
func (s *Store) SetSetting(ctx context.Context, key, value string) error {
	_, err := s.DB.NewInsert().Model(&setting{Key: key, Value: value}).
		On("CONFLICT (key) DO UPDATE").Set("value = EXCLUDED.value").Exec(ctx)
	if err != nil {
		return fmt.Errorf("write setting %s: %w", key, err)
	}
	return nil
}

// Module is the stored state of a module: its config and encrypted secrets.
type Module struct {
	bun.BaseModel `bun:"table:modules"`
	ID            string         `bun:"id,pk"`
	Enabled       bool           `bun:"enabled,notnull"`
	Config        map[string]any `bun:"config,type:text"`
	Secrets       []byte         `bun:"secrets"`
	UpdatedAt     time.Time      `bun:"updated_at,notnull"`
}

// GetModule reads a module's stored state; a module never written returns
// ErrNotFound.
func (s *Store) GetModule(ctx context.Context, id string) (*Module, error) {
	m := new(Module)
	if !keyable(id) {
		return nil, fmt.Errorf("module %q: %w", id, ErrNotFound)
	}
	return one(m, s.DB.NewSelect().Model(m).Where("id = ?", id).Scan(ctx), "module %s", id)
}

// PutModule writes a module's stored state.
func (s *Store) PutModule(ctx context.Context, m *Module) error {
	_, err := s.DB.NewInsert().Model(m).On("CONFLICT (id) DO UPDATE").
		Set("enabled = EXCLUDED.enabled").Set("config = EXCLUDED.config").
		Set("secrets = EXCLUDED.secrets").Set("updated_at = EXCLUDED.updated_at").Exec(ctx)
	if err != nil {
		return fmt.Errorf("write module %s: %w", m.ID, err)
	}
	return nil
}

// FirstSetting stores value under key unless a value is stored already,
// and returns the stored one: the first writer wins, among hosts too.
func (s *Store) FirstSetting(ctx context.Context, key, value string) (string, error) {
	_, err := s.DB.NewInsert().Model(&setting{Key: key, Value: value}).On("CONFLICT (key) DO NOTHING").Exec(ctx)
	if err != nil {
		return "", fmt.Errorf("write setting %s: %w", key, err)
	}
	stored, ok, err := s.Setting(ctx, key)
	if err == nil && !ok {
		err = fmt.Errorf("setting %s vanished", key)
	}
	return stored, err
}

// SealedSecrets returns every module's and service's sealed secrets that are
// set: what a secrets key must open.
func (s *Store) SealedSecrets(ctx context.Context) ([][]byte, error) {
	var out [][]byte
	for _, table := range []string{"modules", "services"} {
		var blobs [][]byte
		err := s.DB.NewSelect().Table(table).Column("secrets").
			Where("secrets IS NOT NULL").Where("length(secrets) > 0").Scan(ctx, &blobs)
		if err != nil {
			return nil, fmt.Errorf("read sealed secrets of %s: %w", table, err)
		}
		out = append(out, blobs...)
	}
	return out, nil
}
