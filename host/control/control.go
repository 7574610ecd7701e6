// Package control is the control plane's one write path: every
// configuration change (a module's config, secrets or enabled flag, the
// active environment, a service's import, refresh, config, secrets, enabled
// flag or deletion, the tool policies) is applied by Plane.Apply, one at a
// time, all or nothing: validate, build the candidate out of service, swap
// it in, persist, and only then retire what it replaced. A failure at any
// step leaves both what runs and what is stored as they were. Each kind's
// owner (host/modules, host/services, host/policy) provides the steps of its
// changes; the plane orders them, records each stored change (GET /changes)
// and announces it to the other hosts, which apply it from the store.
package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
)

// ErrStopped: the plane takes no more changes (the host is shutting down).
var ErrStopped = errors.New("control plane is stopped")

// Kind names what a change is about.
type Kind string

// The kinds of configuration.
const (
	KindEnvironment Kind = "environment" // which environment is active
	KindModule      Kind = "module"      // a module's config, secrets, enabled flag
	KindService     Kind = "service"     // a service and its tools
	KindPolicies    Kind = "policies"    // the tool policies, a set stored whole
)

// Event says that one piece of configuration changed. It carries no values:
// whoever applies it reads the stored state, which is the truth. This is
// what another host will receive (see Notifier).
type Event struct {
	Kind Kind   `json:"kind"`
	ID   string `json:"id"` // the module or service id
}

func (e Event) String() string {
	if e.ID == "" {
		return string(e.Kind) // the environment, the policies: one of each
	}
	return string(e.Kind) + " " + e.ID
}

// Change is one configuration change. Every step is optional; a change
// without Persist applies what is already stored (start-up, another host's
// change) and is not announced.
type Change struct {
	Event Event
	// Config is the proposed config when the change sets one (policies
	// read it); nil otherwise.
	Config map[string]any
	// Validate checks the request before anything is built (schemas,
	// maximums, ids). Secrets are sealed here too.
	Validate func(ctx context.Context) error
	// Build sets the candidate up out of service; on failure it cleans up
	// what it made itself.
	Build func(ctx context.Context) error
	// Swap puts the candidate in service; Unswap puts the previous back
	// when Persist fails, after which Discard tears the candidate down.
	Swap    func()
	Persist func(ctx context.Context) error
	Unswap  func()
	Discard func(ctx context.Context)
	// Commit runs after Persist: it retires what the candidate replaced
	// (an environment drains, an adapter forgets a service).
	Commit func(ctx context.Context)
	// Record, when set, is what the record of changes (GET /changes) says
	// of the change once it is stored.
	Record *Record
}

// Record describes a stored change for the record of changes: an action
// (module.config, service.create, …), its target, and what was set (never
// a secret's value).
type Record struct {
	Action string
	Target string
	Detail map[string]any
}

// Recorder keeps the record of changes; it reads who made a change from
// the context.
type Recorder interface {
	Record(ctx context.Context, action, target string, detail map[string]any)
}

// Policy may refuse a change after it validated and before anything is
// built: an operator's start-up decisions (e.g. no sandbox relaxation
// unless the server was started allowing it) are checked here, so no API
// call can get around them.
type Policy func(ctx context.Context, c *Change) error

// Notifier is told of every change once it is persisted. One host needs
// none; several hosts on one PostgreSQL will publish the event (NOTIFY) so
// the others apply it through their own Reload path.
type Notifier interface {
	Notify(ctx context.Context, ev Event)
}

// Plane serialises configuration changes.
type Plane struct {
	log      *slog.Logger
	policies []Policy
	notifier Notifier
	recorder Recorder

	// turn is held for the whole of one change; a channel, so waiting for
	// it ends with the caller's context.
	turn    chan struct{}
	mu      sync.Mutex
	stopped bool
}

// New returns a plane that checks every change against the policies, tells
// notifier of each one applied, and records to recorder each stored change
// that says what it is (Change.Record); either may be nil.
func New(log *slog.Logger, notifier Notifier, recorder Recorder, policies ...Policy) *Plane {
	return &Plane{log: log, notifier: notifier, recorder: recorder, policies: policies, turn: make(chan struct{}, 1)}
}

// take waits for the plane's turn; it fails when ctx ends first or the
// plane is stopped.
func (p *Plane) take(ctx context.Context) error {
	select {
	case p.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the configuration change under way: %w", ctx.Err())
	}
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped {
		<-p.turn
		return ErrStopped
	}
	return nil
}

// Apply runs one change to the end, after any change before it.
func (p *Plane) Apply(ctx context.Context, c Change) error {
	if err := p.take(ctx); err != nil {
		return err
	}
	defer func() { <-p.turn }()
	if c.Validate != nil {
		if err := c.Validate(ctx); err != nil {
			return err
		}
	}
	for _, pol := range p.policies {
		if err := pol(ctx, &c); err != nil {
			return err
		}
	}
	if c.Build != nil {
		if err := c.Build(ctx); err != nil {
			return err
		}
	}
	if c.Swap != nil {
		c.Swap()
	}
	if c.Persist != nil {
		if err := c.Persist(ctx); err != nil {
			if c.Unswap != nil {
				c.Unswap()
			}
			if c.Discard != nil {
				c.Discard(context.WithoutCancel(ctx))
			}
			return fmt.Errorf("%s: store the change: %w", c.Event, err)
		}
	}
	if c.Commit != nil {
		c.Commit(context.WithoutCancel(ctx))
	}
	// Only a change this host stored is news to the others; one applied
	// from the store (start-up, another host's event) is not.
	if c.Persist != nil {
		p.log.Info("configuration changed", "kind", c.Event.Kind, "id", c.Event.ID)
		if p.recorder != nil && c.Record != nil {
			p.recorder.Record(context.WithoutCancel(ctx), c.Record.Action, c.Record.Target, c.Record.Detail)
		}
		if p.notifier != nil {
			p.notifier.Notify(context.WithoutCancel(ctx), c.Event)
		}
	}
	return nil
}

// Stop refuses further changes and waits for the one under way (if any),
// no longer than ctx allows. A second Stop does nothing.
func (p *Plane) Stop(ctx context.Context) error {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	select {
	case p.turn <- struct{}{}:
		<-p.turn
		return nil
	case <-ctx.Done():
		return fmt.Errorf("a configuration change is still under way: %w", ctx.Err())
	}
}
