package modules

import (
	"context"
	"errors"
	"fmt"

	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/store"
)

// Reload applies a change another host made (its event) from the stored
// state, the way a local change is applied but storing nothing: the
// environment switch or the active environment's new config or secrets
// take effect here too. Changes to other modules need nothing: their state
// is read from the store when used.
func (r *Registry) Reload(ctx context.Context, ev control.Event) error {
	switch ev.Kind {
	case control.KindEnvironment:
		id, err := r.storedActive(ctx)
		if err != nil {
			return err
		}
		if r.isActive(id) {
			return nil // already in force: reloads repeat (notices and syncs)
		}
		return r.plane.Apply(ctx, r.activation(id, nil))
	case control.KindModule:
		var m *store.Module
		c := r.replacement(ev, &m, false)
		build := c.Build
		c.Validate = func(ctx context.Context) error {
			if !r.isActive(ev.ID) {
				build = nil // read from the store when it is activated
				return nil
			}
			var err error
			if m, err = r.stored(ctx, ev.ID); err != nil {
				return err
			}
			if r.activeVersion().Equal(m.UpdatedAt) {
				build = nil // already in force: reloads repeat (notices and syncs)
			}
			return nil
		}
		c.Build = func(ctx context.Context) error {
			if build == nil {
				return nil
			}
			return build(ctx)
		}
		return r.plane.Apply(ctx, c)
	}
	return nil
}

// Activate makes id the active environment. The previous one drains: no new
// executions, in-flight ones finish, then Teardown. When Setup fails the
// previous environment stays active.
func (r *Registry) Activate(ctx context.Context, id string) error {
	c := r.activation(id, func(ctx context.Context) error {
		return r.store.SetSetting(ctx, ActiveSetting, id)
	})
	c.Record = &control.Record{Action: "environment.switch", Target: id, Detail: map[string]any{"module": id}}
	return r.plane.Apply(ctx, c)
}

// activation is the change that sets a fresh instance of environment id up
// with its stored state and swaps it in; persist (nil: nothing) stores it.
func (r *Registry) activation(id string, persist func(context.Context) error) control.Change {
	var m *store.Module
	c := r.replacement(control.Event{Kind: control.KindEnvironment, ID: id}, &m, true)
	c.Validate = func(ctx context.Context) error {
		if _, ok := r.factories[id]; !ok {
			if _, known := r.infos[id]; known {
				return fmt.Errorf("%s: %w", id, ErrNotEnvironment)
			}
			return unknownModule(id, r.factories)
		}
		var err error
		if m, err = r.stored(ctx, id); err != nil {
			return err
		}
		if !m.Enabled {
			return fmt.Errorf("%s: %w", id, ErrDisabled)
		}
		if err := CheckSandbox(m.Config, r.opts.AllowUnsandboxed); err != nil {
			// A config stored while the operator allowed it does not
			// outlive that decision.
			var ue *UnsandboxedError
			if errors.As(err, &ue) {
				ue.Stored = id
			}
			r.mu.Lock()
			if r.active == nil {
				r.setupErr = err.Error()
			}
			r.mu.Unlock()
			return err
		}
		return nil
	}
	c.Persist = persist
	return c
}

// replacement is the part of a change shared by activations and changes
// to a module's config or secrets. For an environment Build sets a fresh
// instance up from *next (filled by Validate): a config that cannot work
// is refused even for an environment that is not active. Swap puts the
// instance in service when it is an activation or the environment is the
// active one, Unswap puts the previous one back and Discard drains the
// fresh one; Commit drains whichever of the two is left out of service.
func (r *Registry) replacement(ev control.Event, next **store.Module, activation bool) control.Change {
	var cand, prev *instance
	swapped := false
	return control.Change{
		Event: ev,
		Build: func(ctx context.Context) error {
			if _, ok := r.factories[ev.ID]; !ok {
				return nil // an adapter: nothing to set up
			}
			env, err := r.setUp(ctx, *next)
			if err != nil {
				if activation {
					r.mu.Lock()
					if r.active == nil {
						r.setupErr = err.Error()
					}
					r.mu.Unlock()
				}
				return err
			}
			cand = &instance{id: ev.ID, env: env, version: (*next).UpdatedAt}
			return nil
		},
		Swap: func() {
			if cand != nil && (activation || r.isActive(ev.ID)) {
				prev, swapped = r.swap(cand), true
			}
		},
		Unswap: func() {
			if swapped {
				r.swap(prev)
			}
		},
		Discard: func(context.Context) {
			if cand != nil {
				r.retire(cand)
			}
		},
		Commit: func(context.Context) {
			switch {
			case swapped && prev != nil:
				r.retire(prev)
			case !swapped && cand != nil:
				r.retire(cand) // only set up to check the config
			}
			if swapped {
				r.log.Info("environment activated", "module", ev.ID)
			}
		},
	}
}
