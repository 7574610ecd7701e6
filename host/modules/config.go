package modules

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/secrets"
)

// ErrActive: the active environment cannot be disabled.
var ErrActive = errors.New("module is the active environment")

// Config returns a module's stored config.
func (r *Registry) Config(ctx context.Context, id string) (map[string]any, error) {
	if _, ok := r.infos[id]; !ok {
		return nil, fmt.Errorf("%s: %w", id, ErrUnknownModule)
	}
	m, err := r.stored(ctx, id)
	if err != nil {
		return nil, err
	}
	if m.Config == nil {
		return map[string]any{}, nil
	}
	return m.Config, nil
}

// SetConfig validates and stores a module's config. For the active
// environment it takes effect at once: a new instance is set up with it and
// the old one drains; if the new one fails to set up, nothing changes.
func (r *Registry) SetConfig(ctx context.Context, id string, cfg map[string]any) (map[string]any, error) {
	info, ok := r.infos[id]
	if !ok {
		return nil, fmt.Errorf("%s: %w", id, ErrUnknownModule)
	}
	if err := validate(info.ConfigSchema, cfg, false); err != nil {
		return nil, err
	}
	if err := CheckSandbox(cfg, r.allowUnsandboxed); err != nil {
		return nil, err
	}
	m, err := r.stored(ctx, id)
	if err != nil {
		return nil, err
	}
	old := m.Config
	m.Config, m.UpdatedAt = cfg, time.Now().UTC()
	if err := r.store.PutModule(ctx, m); err != nil {
		return nil, err
	}
	if err := r.reactivate(ctx, id); err != nil {
		m.Config = old
		if rerr := r.store.PutModule(ctx, m); rerr != nil {
			r.log.Error("restore module config", "module", id, "err", rerr)
		}
		return nil, err
	}
	return cfg, nil
}

// SecretsSet lists which of a module's secrets are set.
func (r *Registry) SecretsSet(ctx context.Context, id string) ([]string, error) {
	if _, ok := r.infos[id]; !ok {
		return nil, fmt.Errorf("%s: %w", id, ErrUnknownModule)
	}
	m, err := r.stored(ctx, id)
	if err != nil {
		return nil, err
	}
	sec, err := r.box.Open(m.Secrets)
	if err != nil {
		return nil, err
	}
	return secrets.SetPaths(sec), nil
}

// SetSecrets validates, seals and stores a module's secrets, applying them
// to the active environment like SetConfig.
func (r *Registry) SetSecrets(ctx context.Context, id string, sec map[string]any) ([]string, error) {
	info, ok := r.infos[id]
	if !ok {
		return nil, fmt.Errorf("%s: %w", id, ErrUnknownModule)
	}
	if err := validate(info.SecretsSchema, sec, true); err != nil {
		return nil, err
	}
	sealed, err := r.box.Seal(sec)
	if err != nil {
		return nil, err
	}
	m, err := r.stored(ctx, id)
	if err != nil {
		return nil, err
	}
	old := m.Secrets
	m.Secrets, m.UpdatedAt = sealed, time.Now().UTC()
	if err := r.store.PutModule(ctx, m); err != nil {
		return nil, err
	}
	if err := r.reactivate(ctx, id); err != nil {
		m.Secrets = old
		if rerr := r.store.PutModule(ctx, m); rerr != nil {
			r.log.Error("restore module secrets", "module", id, "err", rerr)
		}
		return nil, err
	}
	return secrets.SetPaths(sec), nil
}

// SetEnabled enables or disables a module; the active environment cannot be
// disabled.
func (r *Registry) SetEnabled(ctx context.Context, id string, enabled bool) (ModuleView, error) {
	if _, ok := r.infos[id]; !ok {
		return ModuleView{}, fmt.Errorf("%s: %w", id, ErrUnknownModule)
	}
	r.mu.Lock()
	active := r.active != nil && r.active.id == id
	r.mu.Unlock()
	if active && !enabled {
		return ModuleView{}, fmt.Errorf("%s: %w; activate another environment first", id, ErrActive)
	}
	m, err := r.stored(ctx, id)
	if err != nil {
		return ModuleView{}, err
	}
	m.Enabled, m.UpdatedAt = enabled, time.Now().UTC()
	if err := r.store.PutModule(ctx, m); err != nil {
		return ModuleView{}, err
	}
	return r.Module(ctx, id)
}

// reactivate replaces the active environment with a fresh instance when id
// is it, so new config and secrets take effect.
func (r *Registry) reactivate(ctx context.Context, id string) error {
	r.mu.Lock()
	active := r.active != nil && r.active.id == id
	r.mu.Unlock()
	if !active {
		return nil
	}
	return r.Activate(ctx, id)
}

// validate checks a module's config or secrets against its schema.
func validate(raw []byte, v map[string]any, secret bool) error {
	if len(raw) == 0 {
		return nil
	}
	s, err := schema.Compile(raw)
	if err != nil {
		return fmt.Errorf("module schema: %w", err)
	}
	if v == nil {
		v = map[string]any{}
	}
	err = s.Validate(v)
	var ve *schema.ValidationError
	if errors.As(err, &ve) {
		inv := &schema.FieldError{Field: "body", Message: "does not match the module's schema", Problems: ve.Problems}
		if secret {
			return schema.Redact(inv)
		}
		return inv
	}
	return err
}
