package services

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/cyrnel/cyrnel/host/adapters"
	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/secrets"
	"github.com/cyrnel/cyrnel/host/store"
)

// ToolSummary is a tool without its schemas.
type ToolSummary struct {
	ServiceID   string
	ID          string
	Name        string
	Description string
	Enabled     bool
}

// Service is a service with its settings (never its secrets).
type Service struct {
	ID            string
	Adapter       string
	Name          string
	Description   string
	SourceURL     string
	Hash          string
	Enabled       bool
	ConfigSchema  json.RawMessage
	SecretsSchema json.RawMessage
	Config        map[string]any
	SecretsSet    []string
	ToolCount     int
	Tools         []ToolSummary
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

func (m *Manager) get(ctx context.Context, id string) (*store.Service, error) {
	svc, err := m.st.GetService(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("service %s: %w", id, ErrNotFound)
	}
	return svc, err
}

func (m *Manager) view(svc *store.Service, tools []store.Tool, withTools bool) (*Service, error) {
	sec, err := m.box.Open(svc.Secrets)
	if err != nil {
		return nil, err
	}
	var src adapters.Source
	_ = json.Unmarshal(svc.Source, &src) // listings omit the source
	v := &Service{
		ID: svc.ID, Adapter: svc.Adapter, Name: svc.Name, Description: svc.Description, SourceURL: src.URL, Hash: svc.Hash,
		Enabled: svc.Enabled, ConfigSchema: svc.ConfigSchema, SecretsSchema: svc.SecretsSchema, Config: orEmpty(svc.Config),
		SecretsSet: secrets.SetPaths(sec), ToolCount: len(tools), CreatedAt: svc.CreatedAt, UpdatedAt: svc.UpdatedAt,
	}
	if withTools {
		v.Tools = make([]ToolSummary, 0, len(tools))
		for _, t := range tools {
			v.Tools = append(v.Tools, summary(t))
		}
	}
	return v, nil
}

func summary(t store.Tool) ToolSummary {
	return ToolSummary{ServiceID: t.ServiceID, ID: t.ID, Name: t.Name, Description: t.Description, Enabled: t.Enabled}
}

// Get returns a service with its tools.
func (m *Manager) Get(ctx context.Context, id string) (*Service, error) {
	svc, err := m.get(ctx, id)
	if err != nil {
		return nil, err
	}
	tools, err := m.st.ListTools(ctx, store.ToolFilter{ServiceID: id})
	if err != nil {
		return nil, err
	}
	return m.view(svc, tools, true)
}

// List returns every service, without tools.
func (m *Manager) List(ctx context.Context) ([]*Service, error) {
	svcs, err := m.st.ListServices(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*Service, 0, len(svcs))
	m.mu.RLock()
	counts := map[string]int{}
	for id, l := range m.live {
		counts[id] = len(l.tools)
	}
	m.mu.RUnlock()
	for i := range svcs {
		v, err := m.view(&svcs[i], nil, false)
		if err != nil {
			return nil, err
		}
		v.ToolCount = counts[v.ID]
		out = append(out, v)
	}
	return out, nil
}

// existing fails a change to a service that does not exist.
func existing(id string, prev *stored) error {
	if prev.svc == nil {
		return fmt.Errorf("service %s: %w", id, ErrNotFound)
	}
	return nil
}

// edited is prev with its row copied, so a change never alters what runs
// before it is swapped in.
func (m *Manager) edited(prev *stored) *stored {
	svc := *prev.svc
	svc.UpdatedAt = m.now().UTC()
	return &stored{svc: &svc, tools: prev.tools}
}

// SetEnabled enables or disables a service. Enabling needs its config and
// secrets to validate.
func (m *Manager) SetEnabled(ctx context.Context, id string, enabled bool) (*Service, error) {
	err := m.plane.Apply(ctx, recorded(enabledAction("service", enabled), id, map[string]any{"enabled": enabled}, m.change(id, nil, "enabled", func(ctx context.Context, prev *stored) (*stored, func(context.Context) error, error) {
		if err := existing(id, prev); err != nil {
			return nil, nil, err
		}
		if enabled {
			sec, err := m.box.Open(prev.svc.Secrets)
			if err != nil {
				return nil, nil, fmt.Errorf("service %s: open secrets: %w", id, err)
			}
			if err := m.check(prev.svc.ConfigSchema, prev.svc.Config, "config"); err != nil {
				return nil, nil, &schema.FieldError{Field: "enabled", Message: "the service's config does not validate: " + err.Error()}
			}
			if err := m.check(prev.svc.SecretsSchema, sec, "secrets"); err != nil {
				return nil, nil, &schema.FieldError{Field: "enabled", Message: "the service's secrets do not validate: " + schema.Redact(err).Error()}
			}
		}
		next := m.edited(prev)
		next.svc.Enabled = enabled
		return next, func(ctx context.Context) error { return m.st.UpdateService(ctx, next.svc, "enabled", "updated_at") }, nil
	})))
	if err != nil {
		return nil, err
	}
	return m.Get(ctx, id)
}

// Delete removes a service and its tools.
func (m *Manager) Delete(ctx context.Context, id string) error {
	return m.plane.Apply(ctx, recorded("service.delete", id, map[string]any{}, m.change(id, nil, "", func(ctx context.Context, prev *stored) (*stored, func(context.Context) error, error) {
		if err := existing(id, prev); err != nil {
			return nil, nil, err
		}
		return nil, func(ctx context.Context) error { return m.st.DeleteService(ctx, id) }, nil
	})))
}

// RefreshResult says what a refresh changed.
type RefreshResult struct {
	Service *Service
	Added   []string
	Removed []string
}

// Refresh re-reads the service's source; tools that survive keep their
// enabled flags, new ones are enabled.
func (m *Manager) Refresh(ctx context.Context, id string) (*RefreshResult, error) {
	res := &RefreshResult{Added: []string{}, Removed: []string{}}
	// The record of changes says what the refresh added and removed.
	detail := map[string]any{"added": &res.Added, "removed": &res.Removed}
	err := m.plane.Apply(ctx, recorded("service.refresh", id, detail, m.change(id, nil, "source", func(ctx context.Context, prev *stored) (*stored, func(context.Context) error, error) {
		if err := existing(id, prev); err != nil {
			return nil, nil, err
		}
		a, ok := m.adapters[prev.svc.Adapter]
		if !ok {
			return nil, nil, fmt.Errorf("service %s: adapter %q is not available", id, prev.svc.Adapter)
		}
		var src adapters.Source
		if err := json.Unmarshal(prev.svc.Source, &src); err != nil {
			return nil, nil, fmt.Errorf("service %s: stored source: %w", id, err)
		}
		src.Config = prev.svc.Config // the adapter fetches the source by the service's rules
		def, err := a.Definition(ctx, src)
		if err != nil {
			return nil, nil, &schema.FieldError{Field: "source", Message: err.Error()}
		}
		flags := map[string]bool{}
		for _, t := range prev.tools {
			flags[t.ID] = t.Enabled
		}
		next := m.edited(prev)
		next.tools = toolRows(id, def.Tools, flags)
		seen := map[string]bool{}
		for _, t := range next.tools {
			seen[t.ID] = true
			if _, ok := flags[t.ID]; !ok {
				res.Added = append(res.Added, t.ID)
			}
		}
		for _, t := range prev.tools {
			if !seen[t.ID] {
				res.Removed = append(res.Removed, t.ID)
			}
		}
		svc := next.svc
		svc.Name, svc.Description, svc.Hash = noNUL(def.Name), noNUL(def.Description), hash(def)
		svc.ConfigSchema, svc.SecretsSchema, svc.AdapterDomain = def.ConfigSchema, def.SecretsSchema, def.AdapterDomain
		return next, func(ctx context.Context) error { return m.st.PutService(ctx, svc, next.tools) }, nil
	})))
	if err != nil {
		return nil, err
	}
	if res.Service, err = m.Get(ctx, id); err != nil {
		return nil, err
	}
	return res, nil
}

// Config returns a service's config.
func (m *Manager) Config(ctx context.Context, id string) (map[string]any, error) {
	svc, err := m.get(ctx, id)
	if err != nil {
		return nil, err
	}
	return orEmpty(svc.Config), nil
}

// SetConfig validates a service's config, hands it to the adapter, and
// stores it.
func (m *Manager) SetConfig(ctx context.Context, id string, cfg map[string]any) (map[string]any, error) {
	cfg = orEmpty(cfg)
	err := m.plane.Apply(ctx, recorded("service.config", id, map[string]any{"config": cfg}, m.change(id, cfg, "config", func(ctx context.Context, prev *stored) (*stored, func(context.Context) error, error) {
		if err := existing(id, prev); err != nil {
			return nil, nil, err
		}
		if err := m.check(prev.svc.ConfigSchema, cfg, "config"); err != nil {
			return nil, nil, err
		}
		next := m.edited(prev)
		next.svc.Config = cfg
		return next, func(ctx context.Context) error { return m.st.UpdateService(ctx, next.svc, "config", "updated_at") }, nil
	})))
	if err != nil {
		return nil, err
	}
	return cfg, nil
}

// SecretsSet lists which secrets of a service are set.
func (m *Manager) SecretsSet(ctx context.Context, id string) ([]string, error) {
	svc, err := m.get(ctx, id)
	if err != nil {
		return nil, err
	}
	sec, err := m.box.Open(svc.Secrets)
	if err != nil {
		return nil, err
	}
	return secrets.SetPaths(sec), nil
}

// SetSecrets validates, seals and stores a service's secrets (replacing
// them), handing them to the adapter. It returns which are set.
func (m *Manager) SetSecrets(ctx context.Context, id string, sec map[string]any) ([]string, error) {
	sec = orEmpty(sec)
	err := m.plane.Apply(ctx, recorded("service.secrets", id, map[string]any{"secrets": secrets.SetPaths(sec)}, m.change(id, nil, "", func(ctx context.Context, prev *stored) (*stored, func(context.Context) error, error) {
		if err := existing(id, prev); err != nil {
			return nil, nil, err
		}
		if err := m.check(prev.svc.SecretsSchema, sec, "secrets"); err != nil {
			return nil, nil, schema.Redact(err) // never echo secret values back
		}
		sealed, err := m.box.Seal(sec)
		if err != nil {
			return nil, nil, fmt.Errorf("service %s: seal secrets: %w", id, err)
		}
		next := m.edited(prev)
		next.svc.Secrets = sealed
		return next, func(ctx context.Context) error { return m.st.UpdateService(ctx, next.svc, "secrets", "updated_at") }, nil
	})))
	if err != nil {
		return nil, err
	}
	return secrets.SetPaths(sec), nil
}

// recorded is c with what the record of changes says of it.
func recorded(action, target string, detail map[string]any, c control.Change) control.Change {
	c.Record = &control.Record{Action: action, Target: target, Detail: detail}
	return c
}

// enabledAction is kind.enable or kind.disable.
func enabledAction(kind string, enabled bool) string {
	if enabled {
		return kind + ".enable"
	}
	return kind + ".disable"
}

// createDetail is what the record of changes says of a new service: never
// its secrets' values.
func createDetail(in CreateInput) map[string]any {
	src := map[string]any{"url": in.Source.URL}
	if in.Source.URL == "" {
		src = map[string]any{"content": fmt.Sprintf("%d bytes", len(in.Source.Content))}
	}
	return map[string]any{"adapter": in.Adapter, "source": src, "config": orEmpty(in.Config), "secrets": secrets.SetPaths(in.Secrets)}
}
