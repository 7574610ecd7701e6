// Package policy decides whether a tool may be called: ordered rules
// {pattern, decision} matched against "serviceId.toolId", the first match
// winning, and a default for calls no rule matches. The rules are replaced
// as a whole and persisted as one host setting.
package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"sync"
	"sync/atomic"

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

// Engine holds the current set; reads never block.
type Engine struct {
	st  Settings
	cur atomic.Pointer[Set]
	// mu orders the writers (Put, Reload), so the set in force is the one
	// stored last; readers only load cur.
	mu sync.Mutex
	// changed, when set, is told of each set Put stored (several hosts:
	// the others Reload it).
	changed func(ctx context.Context)
	rec     Recorder
}

// Recorder keeps the record of configuration changes (GET /changes).
type Recorder interface {
	Record(ctx context.Context, action, target string, detail map[string]any)
}

// With is what an engine tells of each set Put stores (either may be nil).
type With struct {
	// Recorder records the change (GET /changes).
	Recorder Recorder
	// Changed is told of it (several hosts: the others Reload it).
	Changed func(ctx context.Context)
}

// Reload reads the stored set again (another host stored it).
func (e *Engine) Reload(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	raw, ok, err := e.st.Setting(ctx, Setting)
	if err != nil || !ok {
		return err
	}
	set := &Set{}
	if err := json.Unmarshal([]byte(raw), set); err != nil {
		return fmt.Errorf("stored tool policies: %w", err)
	}
	if err := set.Validate(); err != nil {
		return fmt.Errorf("stored tool policies: %w", err)
	}
	e.cur.Store(set)
	return nil
}

// Load reads the stored set; with none stored, the default is def (empty:
// allow) and there are no rules.
func Load(ctx context.Context, st Settings, def Decision, with With) (*Engine, error) {
	if def == "" {
		def = Allow
	}
	if !def.Valid() {
		return nil, fmt.Errorf("default tool policy %q: must be allow, ask or block", def)
	}
	e := &Engine{st: st, rec: with.Recorder, changed: with.Changed}
	set := &Set{Default: def, Rules: []Rule{}}
	raw, ok, err := st.Setting(ctx, Setting)
	if err != nil {
		return nil, err
	}
	if ok {
		if err := json.Unmarshal([]byte(raw), set); err != nil {
			return nil, fmt.Errorf("stored tool policies: %w", err)
		}
		if err := set.Validate(); err != nil {
			return nil, fmt.Errorf("stored tool policies: %w", err)
		}
	}
	e.cur.Store(set)
	return e, nil
}

// Get returns the current set (callers must not modify it).
func (e *Engine) Get() *Set { return e.cur.Load() }

// Decide returns the current decision for a tool.
func (e *Engine) Decide(serviceID, toolID string) Decision {
	return e.cur.Load().Decide(serviceID, toolID)
}

// Put validates, persists and then swaps in a new set, so a call sees the
// old set or the new one, never a mix.
func (e *Engine) Put(ctx context.Context, s Set) (*Set, error) {
	if s.Rules == nil {
		s.Rules = []Rule{}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("encode tool policies: %w", err)
	}
	e.mu.Lock()
	if err := e.st.SetSetting(ctx, Setting, string(b)); err != nil {
		e.mu.Unlock()
		return nil, err
	}
	e.cur.Store(&s)
	e.mu.Unlock()
	if e.rec != nil {
		e.rec.Record(ctx, "policies.set", Setting, map[string]any{"default": s.Default, "rules": s.Rules})
	}
	if e.changed != nil {
		e.changed(context.WithoutCancel(ctx))
	}
	return &s, nil
}
