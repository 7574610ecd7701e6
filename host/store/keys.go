package store

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"
)

// APIKey is a row of the api_keys table: a key's hash (never the key), its
// name and roles.
type APIKey struct {
	bun.BaseModel `bun:"table:api_keys"`
	ID            string     `bun:"id,pk"`
	Name          string     `bun:"name,notnull"`
	Roles         []string   `bun:"roles,type:text,notnull"`
	Hash          []byte     `bun:"hash,notnull"`
	CreatedAt     time.Time  `bun:"created_at,notnull"`
	ExpiresAt     *time.Time `bun:"expires_at"`
	LastUsedAt    *time.Time `bun:"last_used_at"`
}

// InsertAPIKey stores a new key.
func (s *Store) InsertAPIKey(ctx context.Context, k *APIKey) error {
	if _, err := s.DB.NewInsert().Model(k).Exec(ctx); err != nil {
		return fmt.Errorf("insert api key: %w", classify(err))
	}
	return nil
}

// GetAPIKey reads one key by id.
func (s *Store) GetAPIKey(ctx context.Context, id string) (*APIKey, error) {
	if !keyable(id) {
		return nil, fmt.Errorf("api key %q: %w", id, ErrNotFound)
	}
	k := new(APIKey)
	return one(k, s.DB.NewSelect().Model(k).Where("id = ?", id).Scan(ctx), "api key %s", id)
}

// APIKeyByHash reads the key whose hash is h (ErrNotFound: none).
func (s *Store) APIKeyByHash(ctx context.Context, h []byte) (*APIKey, error) {
	k := new(APIKey)
	return one(k, s.DB.NewSelect().Model(k).Where("hash = ?", h).Scan(ctx), "api key")
}

// APIKeyFilter pages through keys, newest first.
type APIKeyFilter struct {
	Before string // id of the last item of the previous page
	Limit  int
}

// ListAPIKeys lists keys, newest first (ids sort by creation).
func (s *Store) ListAPIKeys(ctx context.Context, f APIKeyFilter) ([]APIKey, error) {
	var out []APIKey
	q := s.DB.NewSelect().Model(&out).Order("id DESC").Limit(int64(f.Limit))
	if f.Before != "" {
		q = q.Where("id < ?", f.Before)
	}
	if err := q.Scan(ctx); err != nil {
		return nil, fmt.Errorf("list api keys: %w", err)
	}
	return out, nil
}

// DeleteAPIKey deletes a key; false when there was none.
func (s *Store) DeleteAPIKey(ctx context.Context, id string) (bool, error) {
	if !keyable(id) {
		return false, nil
	}
	res, err := s.DB.NewDelete().Model((*APIKey)(nil)).Where("id = ?", id).Exec(ctx)
	if err != nil {
		return false, fmt.Errorf("delete api key %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// TouchAPIKey records that key id was used at at, unless a later use is
// recorded already.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	_, err := s.DB.NewUpdate().Model((*APIKey)(nil)).Set("last_used_at = ?", at).Where("id = ?", id).
		WhereGroup(" AND ", func(q *bun.UpdateQuery) *bun.UpdateQuery {
			return q.Where("last_used_at IS NULL").WhereOr("last_used_at < ?", at)
		}).Exec(ctx)
	if err != nil {
		return fmt.Errorf("touch api key %s: %w", id, err)
	}
	return nil
}

// Change is a row of the changes table: one configuration change and the
// key that made it.
type Change struct {
	bun.BaseModel `bun:"table:changes"`
	ID            int64          `bun:"id,pk,autoincrement"`
	At            time.Time      `bun:"at,notnull"`
	KeyID         string         `bun:"key_id,notnull"`
	Action        string         `bun:"action,notnull"`
	Target        string         `bun:"target,notnull"`
	Detail        map[string]any `bun:"detail,type:text,notnull"`
}

// InsertChange stores a change.
func (s *Store) InsertChange(ctx context.Context, c *Change) error {
	if _, err := s.DB.NewInsert().Model(c).Returning("NULL").Exec(ctx); err != nil {
		return fmt.Errorf("insert change: %w", classify(err))
	}
	return nil
}

// ChangeFilter pages through changes, newest first.
type ChangeFilter struct {
	BeforeID int64
	Limit    int
}

// ListChanges lists changes, newest first.
func (s *Store) ListChanges(ctx context.Context, f ChangeFilter) ([]Change, error) {
	var out []Change
	q := s.DB.NewSelect().Model(&out).Order("id DESC").Limit(int64(f.Limit))
	if f.BeforeID > 0 {
		q = q.Where("id < ?", f.BeforeID)
	}
	if err := q.Scan(ctx); err != nil {
		return nil, fmt.Errorf("list changes: %w", err)
	}
	return out, nil
}

// PruneChanges keeps at most keep changes (the newest; 0: no count bound)
// and none older than before (zero: no age bound).
func (s *Store) PruneChanges(ctx context.Context, keep int64, before time.Time) error {
	if err := s.pruneLog(ctx, (*Change)(nil), keep, before); err != nil {
		return fmt.Errorf("prune changes: %w", err)
	}
	return nil
}
