package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/uptrace/bun"
)

// Service is a row of the services table.
type Service struct {
	bun.BaseModel `bun:"table:services"`

	ID            string          `bun:"id,pk"`
	Adapter       string          `bun:"adapter,notnull"`
	Name          string          `bun:"name,notnull"`
	Description   string          `bun:"description,notnull"`
	Source        json.RawMessage `bun:"source,type:text,notnull"`
	Hash          string          `bun:"hash,notnull"`
	ConfigSchema  json.RawMessage `bun:"config_schema,type:text,notnull"`
	SecretsSchema json.RawMessage `bun:"secrets_schema,type:text,notnull"`
	AdapterDomain json.RawMessage `bun:"adapter_domain,type:text,notnull"`
	Config        map[string]any  `bun:"config,type:text"`
	Secrets       []byte          `bun:"secrets"`
	Enabled       bool            `bun:"enabled,notnull"`
	CreatedAt     time.Time       `bun:"created_at,notnull"`
	UpdatedAt     time.Time       `bun:"updated_at,notnull"`
}

// Tool is a row of the tools table.
type Tool struct {
	bun.BaseModel `bun:"table:tools"`

	ServiceID     string          `bun:"service_id,pk"`
	ID            string          `bun:"id,pk"`
	Name          string          `bun:"name,notnull"`
	Description   string          `bun:"description,notnull"`
	InputSchema   json.RawMessage `bun:"input_schema,type:text,notnull"`
	OutputSchema  json.RawMessage `bun:"output_schema,type:text,notnull"`
	AdapterDomain json.RawMessage `bun:"adapter_domain,type:text,notnull"`
	Enabled       bool            `bun:"enabled,notnull"`
}

// PutService writes a service and replaces its tools, in one transaction.
func (s *Store) PutService(ctx context.Context, svc *Service, tools []Tool) error {
	err := s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		if _, err := tx.NewInsert().Model(svc).On("CONFLICT (id) DO UPDATE").
			Set("adapter = EXCLUDED.adapter").Set("name = EXCLUDED.name").Set("description = EXCLUDED.description").
			Set("source = EXCLUDED.source").Set("hash = EXCLUDED.hash").
			Set("config_schema = EXCLUDED.config_schema").Set("secrets_schema = EXCLUDED.secrets_schema").
			Set("adapter_domain = EXCLUDED.adapter_domain").Set("config = EXCLUDED.config").
			Set("secrets = EXCLUDED.secrets").Set("enabled = EXCLUDED.enabled").Set("updated_at = EXCLUDED.updated_at").
			Exec(ctx); err != nil {
			return err
		}
		if _, err := tx.NewDelete().Model((*Tool)(nil)).Where("service_id = ?", svc.ID).Exec(ctx); err != nil {
			return err
		}
		// Batches keep each statement under the drivers' parameter limits.
		for start := 0; start < len(tools); start += 100 {
			batch := tools[start:min(start+100, len(tools))]
			if _, err := tx.NewInsert().Model(&batch).Exec(ctx); err != nil {
				return err
			}
		}
		return s.indexTools(ctx, tx, svc.ID, tools)
	})
	if err != nil {
		return fmt.Errorf("write service %s: %w", svc.ID, err)
	}
	return nil
}

// InsertService stores a new service; ErrExists when the id is taken.
func (s *Store) InsertService(ctx context.Context, svc *Service, tools []Tool) error {
	if _, err := s.GetService(ctx, svc.ID); err == nil {
		return fmt.Errorf("service %s: %w", svc.ID, ErrExists)
	} else if !errors.Is(err, ErrNotFound) {
		return err
	}
	return s.PutService(ctx, svc, tools)
}

// one is the outcome of reading the one row v names (format and args, as
// "process 3"): ErrNotFound when there is none.
// keyable says whether keys can be looked up at all. No row holds a NUL
// or invalid UTF-8 (nothing the host writes does), and either makes the
// query itself fail (SQLite's tokenizer stops at a NUL, PostgreSQL refuses
// the encoding) with the database's words: a lookup of one finds nothing.
func keyable(keys ...string) bool {
	for _, k := range keys {
		if strings.IndexByte(k, 0) >= 0 || !utf8.ValidString(k) {
			return false
		}
	}
	return true
}

func one[T any](v *T, err error, format string, args ...any) (*T, error) {
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf(format+": %w", append(args, ErrNotFound)...)
	}
	if err != nil {
		return nil, fmt.Errorf("get "+format+": %w", append(args, err)...)
	}
	return v, nil
}

// ErrExists is returned when creating something whose id is taken.
var ErrExists = errors.New("already exists")

// GetService reads one service.
func (s *Store) GetService(ctx context.Context, id string) (*Service, error) {
	svc := new(Service)
	if !keyable(id) {
		return nil, fmt.Errorf("service %q: %w", id, ErrNotFound)
	}
	return one(svc, s.DB.NewSelect().Model(svc).Where("id = ?", id).Scan(ctx), "service %s", id)
}

// ListServices returns every service by id, without sources.
func (s *Store) ListServices(ctx context.Context) ([]Service, error) {
	var out []Service
	if err := s.DB.NewSelect().Model(&out).ExcludeColumn("source").OrderExpr("id").Scan(ctx); err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	return out, nil
}

// UpdateService writes the given columns of a service.
func (s *Store) UpdateService(ctx context.Context, svc *Service, columns ...string) error {
	res, err := s.DB.NewUpdate().Model(svc).Column(columns...).WherePK().Exec(ctx)
	if err != nil {
		return fmt.Errorf("update service %s: %w", svc.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("service %s: %w", svc.ID, ErrNotFound)
	}
	return nil
}

// DeleteService removes a service and its tools.
func (s *Store) DeleteService(ctx context.Context, id string) error {
	if !keyable(id) {
		return fmt.Errorf("service %q: %w", id, ErrNotFound)
	}
	err := s.DB.RunInTx(ctx, nil, func(ctx context.Context, tx bun.Tx) error {
		// Explicit, so it holds without foreign-key enforcement too.
		if _, err := tx.NewRaw("DELETE FROM tool_search WHERE service_id = ?", id).Exec(ctx); err != nil {
			return err
		}
		if _, err := tx.NewDelete().Model((*Tool)(nil)).Where("service_id = ?", id).Exec(ctx); err != nil {
			return err
		}
		res, err := tx.NewDelete().Model((*Service)(nil)).Where("id = ?", id).Exec(ctx)
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("service %s: %w", id, ErrNotFound)
		}
		return nil
	})
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("delete service %s: %w", id, err)
	}
	return err
}

// ToolFilter selects tools.
type ToolFilter struct {
	ServiceID string
	Enabled   *bool
	AfterKey  [2]string
	Limit     int
	// Schemas includes the input and output schemas (large) in the rows.
	Schemas bool
}

// ListTools returns tools ordered by service and id.
func (s *Store) ListTools(ctx context.Context, f ToolFilter) ([]Tool, error) {
	var out []Tool
	q := s.DB.NewSelect().Model(&out).OrderExpr("service_id, id")
	if !f.Schemas {
		q = q.ExcludeColumn("input_schema", "output_schema", "adapter_domain")
	}
	if f.ServiceID != "" {
		q = q.Where("service_id = ?", f.ServiceID)
	}
	if f.Enabled != nil {
		q = q.Where("enabled = ?", *f.Enabled)
	}
	if f.AfterKey[0] != "" {
		q = q.Where("(service_id > ? OR (service_id = ? AND id > ?))", f.AfterKey[0], f.AfterKey[0], f.AfterKey[1])
	}
	if f.Limit > 0 {
		q = q.Limit(int64(f.Limit))
	}
	if err := q.Scan(ctx); err != nil {
		return nil, fmt.Errorf("list tools: %w", err)
	}
	return out, nil
}

// GetTool reads one tool with its schemas.
func (s *Store) GetTool(ctx context.Context, serviceID, id string) (*Tool, error) {
	t := new(Tool)
	if !keyable(serviceID, id) {
		return nil, fmt.Errorf("tool %q.%q: %w", serviceID, id, ErrNotFound)
	}
	return one(t, s.DB.NewSelect().Model(t).Where("service_id = ? AND id = ?", serviceID, id).Scan(ctx), "tool %s.%s", serviceID, id)
}

// SetToolEnabled enables or disables a tool.
func (s *Store) SetToolEnabled(ctx context.Context, serviceID, id string, enabled bool) error {
	if !keyable(serviceID, id) {
		return fmt.Errorf("tool %q.%q: %w", serviceID, id, ErrNotFound)
	}
	res, err := s.DB.NewUpdate().Model((*Tool)(nil)).Set("enabled = ?", enabled).
		Where("service_id = ? AND id = ?", serviceID, id).Exec(ctx)
	if err != nil {
		return fmt.Errorf("update tool %s.%s: %w", serviceID, id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("tool %s.%s: %w", serviceID, id, ErrNotFound)
	}
	return nil
}
