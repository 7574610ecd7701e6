// Package modules keeps the registry of modules: the environments (exactly
// one active, older ones draining until their executions finish) and the
// adapters, with their stored config and secrets.
package modules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/lifecycle"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/store"
)

// ActiveSetting is the setting that remembers the active environment.
const ActiveSetting = "environment.active"

// DefaultEnvironment is active on a fresh data directory.
const DefaultEnvironment = "python"

// Errors the API maps to statuses.
var (
	ErrUnknownModule  = errors.New("unknown module")
	ErrNotEnvironment = errors.New("module is not an environment")
	ErrDisabled       = errors.New("module is disabled")
	ErrNoEnvironment  = errors.New("no active environment")
	ErrSetup          = errors.New("environment setup failed")
)

// Factory makes a fresh, not yet set up, environment.
type Factory func() module.Environment

// Store is what the registry needs from storage.
type Store interface {
	Setting(ctx context.Context, key string) (string, bool, error)
	SetSetting(ctx context.Context, key, value string) error
	GetModule(ctx context.Context, id string) (*store.Module, error)
	PutModule(ctx context.Context, m *store.Module) error
}

// Sealer opens stored secrets.
type Sealer interface {
	Seal(v map[string]any) ([]byte, error)
	Open(sealed []byte) (map[string]any, error)
}

// instance is one set-up environment and what runs in it.
type instance struct {
	id       string
	env      module.Environment
	version  time.Time // the stored module's update time it was set up from
	inflight int
	draining bool
	idle     chan struct{} // closed when draining and nothing is in flight
}

// Registry is the module registry. Every change to it goes through the
// control plane (one at a time, all or nothing); executions only read it.
type Registry struct {
	log      *slog.Logger
	store    Store
	box      Sealer
	plane    *control.Plane
	bindings module.Bindings

	factories map[string]Factory
	infos     map[string]module.Info
	opts      Options

	mu       sync.Mutex
	active   *instance
	draining []*instance
	owners   map[int64]*instance
	setupErr string
	closed   bool
	drains   sync.WaitGroup // one per draining instance, waited for by Stop
}

// Options are the operator's start-up decisions and what else the registry
// lists.
type Options struct {
	// AllowUnsandboxed lets configs weaken the sandbox (serve
	// --allow-unsandboxed).
	AllowUnsandboxed bool
	// Machine is what this machine has (read at start-up): configs whose
	// limits ask for more are refused. Zero: not checked.
	Machine module.Machine
	// Others are modules that are not environments (adapters), listed and
	// configurable.
	Others []module.Info
	// Environment, when set, is activated instead of the stored choice and
	// not stored: a one-off host (cyrnel run FILE.ts) leaves the data
	// directory's choice alone.
	Environment string
	// Now is the clock stored configs are stamped by (nil: time.Now).
	Now func() time.Time
}

// New returns a registry of the given environments (by module id), changed
// through plane.
func New(log *slog.Logger, st Store, box Sealer, plane *control.Plane, envs map[string]Factory, opts Options) *Registry {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r := &Registry{log: log, store: st, box: box, plane: plane, factories: envs, opts: opts, infos: map[string]module.Info{}, owners: map[int64]*instance{}}
	for id, f := range envs {
		r.infos[id] = f().Info()
	}
	for _, info := range opts.Others {
		r.infos[info.ID] = info
	}
	return r
}

// Activation is the activation of the stored environment (python on a
// fresh data dir), or of Options.Environment without storing it, with b:
// a component of its own, as the bindings (the process manager) execute
// through this registry, so it starts once they exist. A failure to set the
// environment up is logged and reported by Status rather than stopping the
// host: the operator can fix the config through the API. Its Stop does
// nothing: the registry's Stop tears the environment down.
func (r *Registry) Activation(b module.Bindings) lifecycle.Component {
	return lifecycle.Func{OnStart: func(ctx context.Context) error { return r.activate(ctx, b) }}
}

func (r *Registry) activate(ctx context.Context, b module.Bindings) error {
	r.bindings = b
	id := r.opts.Environment
	if id == "" {
		var err error
		if id, err = r.storedActive(ctx); err != nil {
			return err
		}
	}
	if err := r.plane.Apply(ctx, r.activation(id, nil)); err != nil {
		r.log.Error("no environment is active", "module", id, "err", err)
	}
	return nil
}

func (r *Registry) storedActive(ctx context.Context) (string, error) {
	id, ok, err := r.store.Setting(ctx, ActiveSetting)
	if err != nil {
		return "", fmt.Errorf("read the active environment: %w", err)
	}
	if !ok {
		return DefaultEnvironment, nil
	}
	return id, nil
}

func (r *Registry) isActive(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.active != nil && r.active.id == id
}

// setUp makes and sets up a fresh instance of environment m.ID with m's
// config and secrets. A config the environment finds cannot work (a
// preload it cannot import) is a FieldError on that field of the config;
// one naming what the operator did not declare, an UndeclaredError.
func (r *Registry) setUp(ctx context.Context, m *store.Module) (module.Environment, error) {
	// Whatever the config's way here (a change, an activation, another
	// host's change on a smaller machine), its limits fit this machine.
	if err := CheckLimits(m.Config, r.opts.Machine); err != nil {
		return nil, err
	}
	sec, err := r.box.Open(m.Secrets)
	if err != nil {
		return nil, fmt.Errorf("%s: open secrets: %w", m.ID, err)
	}
	env := r.factories[m.ID]()
	if err := env.Setup(ctx, module.SetupContext{Config: m.Config, Secrets: sec, Bindings: r.bindings}); err != nil {
		if terr := env.Teardown(context.WithoutCancel(ctx)); terr != nil {
			r.log.Warn("teardown after a failed setup", "module", m.ID, "err", terr)
		}
		var ce *module.ConfigError
		if errors.As(err, &ce) && errors.Is(ce.Err, module.ErrUndeclared) {
			return nil, &UndeclaredError{Field: "config." + ce.Field, Module: m.ID, Err: ce.Err}
		}
		if errors.As(err, &ce) {
			return nil, &schema.FieldError{Field: "config." + ce.Field, Message: ce.Err.Error()}
		}
		return nil, fmt.Errorf("%w: %s: %w", ErrSetup, m.ID, err)
	}
	return env, nil
}

// activeVersion is the update time of the stored module the active
// environment was set up from.
func (r *Registry) activeVersion() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.active == nil {
		return time.Time{}
	}
	return r.active.version
}

// swap makes in (nil: none) the active instance and returns the previous.
func (r *Registry) swap(in *instance) *instance {
	r.mu.Lock()
	defer r.mu.Unlock()
	prev := r.active
	r.active = in
	if in != nil {
		r.setupErr = ""
	}
	return prev
}

// retire drains in: no new executions reach it (it is no longer active),
// the ones in flight finish, then it is torn down by a goroutine Stop waits
// for.
func (r *Registry) retire(in *instance) {
	r.mu.Lock()
	in.draining = true
	in.idle = make(chan struct{})
	if in.inflight == 0 {
		close(in.idle)
	}
	r.draining = append(r.draining, in)
	r.drains.Add(1)
	r.mu.Unlock()
	go r.drain(in)
}

func (r *Registry) drain(in *instance) {
	defer r.drains.Done()
	<-in.idle
	if err := in.env.Teardown(context.Background()); err != nil {
		r.log.Warn("environment teardown failed", "module", in.id, "err", err)
	}
	r.mu.Lock()
	for i, d := range r.draining {
		if d == in {
			r.draining = append(r.draining[:i], r.draining[i+1:]...)
			break
		}
	}
	r.mu.Unlock()
	r.log.Info("drained environment torn down", "module", in.id)
}

// stored reads a module's stored state, defaulting to enabled with no config.
func (r *Registry) stored(ctx context.Context, id string) (*store.Module, error) {
	m, err := r.store.GetModule(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return &store.Module{ID: id, Enabled: true}, nil
	}
	return m, err
}

// Execute runs in on the active environment; it returns the environment id
// that ran it.
func (r *Registry) Execute(ctx context.Context, in module.ExecutionInput) (string, module.Result, error) {
	r.mu.Lock()
	inst := r.active
	if inst == nil || r.closed {
		msg := r.setupErr
		r.mu.Unlock()
		if msg != "" {
			return "", module.Result{}, fmt.Errorf("%w: %s", ErrNoEnvironment, msg)
		}
		return "", module.Result{}, ErrNoEnvironment
	}
	inst.inflight++
	r.owners[in.EID] = inst
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.owners, in.EID)
		inst.inflight--
		if inst.draining && inst.inflight == 0 {
			close(inst.idle)
		}
		r.mu.Unlock()
	}()
	res, err := inst.env.Execute(ctx, in)
	return inst.id, res, err
}

// Kill asks the environment that owns eid, active or draining, to stop it.
func (r *Registry) Kill(ctx context.Context, eid int64) error {
	r.mu.Lock()
	inst := r.owners[eid]
	r.mu.Unlock()
	if inst == nil {
		return nil
	}
	return inst.env.Kill(ctx, eid)
}

// Active returns the active environment, or ErrNoEnvironment.
func (r *Registry) Active() (module.Environment, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.active == nil {
		if r.setupErr != "" {
			return nil, fmt.Errorf("%w: %s", ErrNoEnvironment, r.setupErr)
		}
		return nil, ErrNoEnvironment
	}
	return r.active.env, nil
}

// Stop takes no more changes (once the one under way has ended), kills
// every execution, and tears every environment down, waiting for the
// drains too, no longer than ctx allows. A second Stop does nothing.
func (r *Registry) Stop(ctx context.Context) error {
	// Past the deadline a change may still be under way; the environments
	// are torn down all the same.
	planeErr := r.plane.Stop(ctx)
	r.mu.Lock()
	r.closed = true
	all := append([]*instance(nil), r.draining...)
	if r.active != nil {
		all = append(all, r.active)
	}
	r.active = nil
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, in := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := in.env.Teardown(ctx); err != nil {
				r.log.Warn("environment teardown failed", "module", in.id, "err", err)
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		// Torn down, the draining instances' executions have ended, so
		// their drains end too.
		r.drains.Wait()
		close(done)
	}()
	if err := lifecycle.Await(ctx, done); err != nil {
		return fmt.Errorf("environments still tearing down at the shutdown deadline: %w", err)
	}
	return planeErr
}

// unknownModule is ErrUnknownModule for id, naming the modules there are
// (known: by id).
func unknownModule[V any](id string, known map[string]V) error {
	return fmt.Errorf("%s: %w (there are: %s)", id, ErrUnknownModule, strings.Join(slices.Sorted(maps.Keys(known)), ", "))
}
