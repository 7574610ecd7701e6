package modules

import (
	"context"
	"errors"
	"fmt"

	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/secrets"
	"github.com/cyrnel/cyrnel/host/store"
)

// ErrActive: the active environment cannot be disabled.
var ErrActive = errors.New("module is the active environment")

// Config returns a module's stored config.
func (r *Registry) Config(ctx context.Context, id string) (map[string]any, error) {
	if _, ok := r.infos[id]; !ok {
		return nil, unknownModule(id, r.infos)
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
// swapped in, the old one drains; if the new one fails to set up, or the
// config cannot be stored, nothing changes. An environment that is not
// active is set up with it all the same, as a check.
func (r *Registry) SetConfig(ctx context.Context, id string, cfg map[string]any) (map[string]any, error) {
	if cfg == nil {
		cfg = map[string]any{}
	}
	c := r.moduleChange(id, cfg, func(ctx context.Context, m *store.Module) error {
		info := r.infos[id]
		if err := validate(info.ConfigSchema, cfg, false); err != nil {
			return err
		}
		if err := CheckLimits(cfg, r.opts.Machine); err != nil {
			return err
		}
		if err := CheckSandbox(cfg, r.opts.AllowUnsandboxed); err != nil {
			return err
		}
		m.Config = cfg
		return nil
	})
	c.Record = &control.Record{Action: "module.config", Target: id, Detail: map[string]any{"config": cfg}}
	if err := r.plane.Apply(ctx, c); err != nil {
		return nil, err
	}
	return cfg, nil
}

// moduleChange is a change to module id's stored row: edit validates the
// request and applies it to a copy of the row (sealing secrets if need be).
// For an environment a fresh instance is set up with the copy before it is
// stored, and swapped in if the environment is the active one.
func (r *Registry) moduleChange(id string, cfg map[string]any, edit func(ctx context.Context, m *store.Module) error) control.Change {
	var next *store.Module
	c := r.replacement(control.Event{Kind: control.KindModule, ID: id}, &next, false)
	c.Config = cfg
	c.Validate = func(ctx context.Context) error {
		if _, ok := r.infos[id]; !ok {
			return unknownModule(id, r.infos)
		}
		m, err := r.stored(ctx, id)
		if err != nil {
			return err
		}
		if err := edit(ctx, m); err != nil {
			return err
		}
		m.UpdatedAt = r.opts.Now().UTC()
		next = m
		return nil
	}
	c.Persist = func(ctx context.Context) error { return r.store.PutModule(ctx, next) }
	return c
}

// SecretsSet lists which of a module's secrets are set.
func (r *Registry) SecretsSet(ctx context.Context, id string) ([]string, error) {
	if _, ok := r.infos[id]; !ok {
		return nil, unknownModule(id, r.infos)
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
	c := r.moduleChange(id, nil, func(ctx context.Context, m *store.Module) error {
		if err := validate(r.infos[id].SecretsSchema, sec, true); err != nil {
			return err
		}
		sealed, err := r.box.Seal(sec)
		if err != nil {
			return fmt.Errorf("%s: seal secrets: %w", id, err)
		}
		m.Secrets = sealed
		return nil
	})
	c.Record = &control.Record{Action: "module.secrets", Target: id, Detail: map[string]any{"secrets": secrets.SetPaths(sec)}}
	if err := r.plane.Apply(ctx, c); err != nil {
		return nil, err
	}
	return secrets.SetPaths(sec), nil
}

// SetEnabled enables or disables a module; the active environment cannot be
// disabled.
func (r *Registry) SetEnabled(ctx context.Context, id string, enabled bool) (ModuleView, error) {
	c := r.moduleChange(id, nil, func(ctx context.Context, m *store.Module) error {
		if !enabled && r.isActive(id) {
			return fmt.Errorf("%s: %w; activate another environment first", id, ErrActive)
		}
		m.Enabled = enabled
		return nil
	})
	// Nothing runs differently: a disabled module is refused when one
	// tries to activate it.
	c.Build = nil
	c.Record = &control.Record{Action: map[bool]string{true: "module.enable", false: "module.disable"}[enabled], Target: id, Detail: map[string]any{"enabled": enabled}}
	if err := r.plane.Apply(ctx, c); err != nil {
		return ModuleView{}, err
	}
	return r.Module(ctx, id)
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
		field := "config"
		if secret {
			field = "secrets"
		}
		inv := &schema.FieldError{Field: field, Message: "does not match the module's schema", Problems: ve.Problems}
		if secret {
			return schema.Redact(inv)
		}
		return inv
	}
	return err
}
