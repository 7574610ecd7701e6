// Package policy decides whether a tool may be called: ordered rules
// {pattern, decision} matched against "serviceId.toolId", the first match
// winning, and a default for calls no rule matches. The rules are replaced
// as a whole and persisted as one host setting, through the control plane
// (host/control) like every other configuration change.
package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"sync/atomic"

	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/schema"
)

// Decision is what a policy says about a call.
type Decision string

const (
	Allow Decision = "allow"
	Ask   Decision = "ask"
	Block Decision = "block"
)

// Decisions are every decision, in the order the API's spec lists them.
var Decisions = []Decision{Allow, Ask, Block}

// Valid reports whether d is one of the three decisions.
func (d Decision) Valid() bool { return d == Allow || d == Ask || d == Block }

// Rule matches tools by a glob on "serviceId.toolId" (path.Match syntax:
// *, ?, [...]; ids hold no '/', so * spans the whole key).
type Rule struct {
	Pattern  string   `json:"pattern"`
	Decision Decision `json:"decision"`
}

// Set is the whole policy: rules in order, then the default. Its JSON
// names are how the store keeps it; host/api has the wire shape.
type Set struct {
	Default Decision `json:"default"`
	Rules   []Rule   `json:"rules"`
}

// MaxRules bounds a policy set.
const MaxRules = 1000

// Validate checks every rule, naming the failing field of the set
// (rules[2].pattern).
func (s *Set) Validate() error {
	if !s.Default.Valid() {
		return &schema.FieldError{Field: "default", Message: "must be allow, ask or block"}
	}
	if len(s.Rules) > MaxRules {
		return &schema.FieldError{Field: "rules", Message: fmt.Sprintf("at most %d rules", MaxRules)}
	}
	for i, r := range s.Rules {
		if r.Pattern == "" {
			return &schema.FieldError{Field: fmt.Sprintf("rules[%d].pattern", i), Message: "must not be empty"}
		}
		if _, err := path.Match(r.Pattern, ""); err != nil {
			return &schema.FieldError{Field: fmt.Sprintf("rules[%d].pattern", i), Message: "not a valid glob: " + err.Error()}
		}
		if !r.Decision.Valid() {
			return &schema.FieldError{Field: fmt.Sprintf("rules[%d].decision", i), Message: "must be allow, ask or block"}
		}
	}
	return nil
}

// Decide returns the decision for a tool.
func (s *Set) Decide(serviceID, toolID string) Decision {
	key := serviceID + "." + toolID
	for _, r := range s.Rules {
		// Patterns were validated on the way in, so Match cannot fail.
		if ok, _ := path.Match(r.Pattern, key); ok {
			return r.Decision
		}
	}
	return s.Default
}

// Settings persist the set.
type Settings interface {
	Setting(ctx context.Context, key string) (string, bool, error)
	SetSetting(ctx context.Context, key, value string) error
}

// Setting is the setting that holds the stored set.
const Setting = "tool-policies"

// Plane applies configuration changes one at a time (host/control): it
// orders a change to the policies with every other change, records it and
// tells the other hosts of it.
type Plane interface {
	Apply(ctx context.Context, c control.Change) error
}

// event names the policies to the plane and to the other hosts: one set,
// so no id.
var event = control.Event{Kind: control.KindPolicies}

// Engine holds the current set; reads never block. It is written only
// through the plane, which orders the writers (Put, Reload), so the set in
// force is the one stored last.
type Engine struct {
	st    Settings
	plane Plane
	cur   atomic.Pointer[Set]
}

// stored reads the stored set; ok is false when none is stored.
func stored(ctx context.Context, st Settings) (set *Set, ok bool, err error) {
	raw, ok, err := st.Setting(ctx, Setting)
	if err != nil || !ok {
		return nil, false, err
	}
	set = &Set{}
	if err := json.Unmarshal([]byte(raw), set); err != nil {
		return nil, false, fmt.Errorf("stored tool policies: %w", err)
	}
	if err := set.Validate(); err != nil {
		return nil, false, fmt.Errorf("stored tool policies: %w", err)
	}
	return set, true, nil
}

// Reload applies the stored set again (another host stored it); with none
// stored, the set in force stays.
func (e *Engine) Reload(ctx context.Context) error {
	var next *Set
	return e.plane.Apply(ctx, control.Change{
		Event: event,
		Build: func(ctx context.Context) (err error) {
			next, _, err = stored(ctx, e.st)
			return err
		},
		Swap: func() {
			if next != nil {
				e.cur.Store(next)
			}
		},
	})
}

// Load reads the stored set; with none stored, the default is def (empty:
// allow) and there are no rules. Changes go through plane.
func Load(ctx context.Context, st Settings, plane Plane, def Decision) (*Engine, error) {
	if def == "" {
		def = Allow
	}
	if !def.Valid() {
		return nil, fmt.Errorf("default tool policy %q: must be allow, ask or block", def)
	}
	set, ok, err := stored(ctx, st)
	if err != nil {
		return nil, err
	}
	if !ok {
		set = &Set{Default: def, Rules: []Rule{}}
	}
	e := &Engine{st: st, plane: plane}
	e.cur.Store(set)
	return e, nil
}

// Get returns the current set (callers must not modify it).
func (e *Engine) Get() *Set { return e.cur.Load() }

// Decide returns the current decision for a tool.
func (e *Engine) Decide(serviceID, toolID string) Decision {
	return e.cur.Load().Decide(serviceID, toolID)
}

// Put replaces the set through the plane: validated before anything
// changes, then swapped in and stored, the old set put back if storing
// fails; a call sees the old set or the new one, never a mix.
func (e *Engine) Put(ctx context.Context, s Set) (*Set, error) {
	if s.Rules == nil {
		s.Rules = []Rule{}
	}
	var (
		raw  []byte
		prev *Set
	)
	err := e.plane.Apply(ctx, control.Change{
		Event: event,
		Validate: func(context.Context) (err error) {
			if err = s.Validate(); err != nil {
				return err
			}
			if raw, err = json.Marshal(s); err != nil {
				return fmt.Errorf("encode tool policies: %w", err)
			}
			return nil
		},
		Swap:    func() { prev = e.cur.Swap(&s) },
		Persist: func(ctx context.Context) error { return e.st.SetSetting(ctx, Setting, string(raw)) },
		Unswap:  func() { e.cur.Store(prev) },
		Record:  &control.Record{Action: "policies.set", Target: Setting, Detail: map[string]any{"default": s.Default, "rules": s.Rules}},
	})
	if err != nil {
		return nil, err
	}
	return &s, nil
}
