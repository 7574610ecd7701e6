// Package modules keeps the registry of modules: the environments (exactly
// one active, older ones draining until their executions finish) and the
// adapters, with their stored config and secrets.
package modules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/store"
)

// activeKey is the setting that remembers the active environment.
const activeKey = "environment.active"

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
	inflight int
	draining bool
	idle     chan struct{} // closed when draining and nothing is in flight
}

// Registry is the module registry.
type Registry struct {
	log      *slog.Logger
	store    Store
	box      Sealer
	bindings module.Bindings

	factories map[string]Factory
	infos     map[string]module.Info
	// allowUnsandboxed: configs may weaken the sandbox (serve
	// --allow-unsandboxed).
	allowUnsandboxed bool

	mu       sync.Mutex
	active   *instance
	draining []*instance
	owners   map[int64]*instance
	setupErr string
	closed   bool
}

// New returns a registry of the given environments (by module id).
func New(log *slog.Logger, st Store, box Sealer, envs map[string]Factory) *Registry {
	r := &Registry{log: log, store: st, box: box, factories: envs, infos: map[string]module.Info{}, owners: map[int64]*instance{}}
	for id, f := range envs {
		r.infos[id] = f().Info()
	}
	return r
}

// AddInfo registers a module that is not an environment (an adapter), so it
// is listed and configurable.
func (r *Registry) AddInfo(info module.Info) { r.infos[info.ID] = info }

// Start activates the stored environment (python on a fresh data dir), or
// override when not empty, without storing it: a one-off host (cyrnel run
// FILE.ts) leaves the data directory's choice alone. A failure is logged and
// reported by Status rather than stopping the host: the operator can fix the
// config through the API.
func (r *Registry) Start(ctx context.Context, b module.Bindings, override string) {
	r.bindings = b
	id, ok, err := r.store.Setting(ctx, activeKey)
	if err != nil || !ok {
		id = DefaultEnvironment
	}
	if override != "" {
		id = override
	}
	if err := r.activate(ctx, id, override == ""); err != nil {
		r.log.Error("no environment is active", "module", id, "err", err)
	}
}

// Activate makes id the active environment. The previous one drains: no new
// executions, in-flight ones finish, then Teardown. When Setup fails the
// previous environment stays active.
func (r *Registry) Activate(ctx context.Context, id string) error { return r.activate(ctx, id, true) }

func (r *Registry) activate(ctx context.Context, id string, persist bool) error {
	f, ok := r.factories[id]
	if !ok {
		if _, known := r.infos[id]; known {
			return fmt.Errorf("%s: %w", id, ErrNotEnvironment)
		}
		return fmt.Errorf("%s: %w", id, ErrUnknownModule)
	}
	m, err := r.stored(ctx, id)
	if err != nil {
		return err
	}
	if !m.Enabled {
		return fmt.Errorf("%s: %w", id, ErrDisabled)
	}
	if err := CheckSandbox(m.Config, r.allowUnsandboxed); err != nil {
		// A config stored while the operator allowed it does not outlive
		// that decision.
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
	sec, err := r.box.Open(m.Secrets)
	if err != nil {
		return fmt.Errorf("%s: %w", id, err)
	}
	env := f()
	if err := env.Setup(ctx, module.SetupContext{Config: m.Config, Secrets: sec, Bindings: r.bindings}); err != nil {
		r.mu.Lock()
		if r.active == nil {
			r.setupErr = err.Error()
		}
		r.mu.Unlock()
		_ = env.Teardown(ctx)
		return fmt.Errorf("%w: %s: %w", ErrSetup, id, err)
	}
	if persist {
		if err := r.store.SetSetting(ctx, activeKey, id); err != nil {
			_ = env.Teardown(ctx)
			return err
		}
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return env.Teardown(ctx)
	}
	old := r.active
	r.active = &instance{id: id, env: env}
	r.setupErr = ""
	if old != nil {
		old.draining = true
		old.idle = make(chan struct{})
		if old.inflight == 0 {
			close(old.idle)
		}
		r.draining = append(r.draining, old)
	}
	r.mu.Unlock()
	r.log.Info("environment activated", "module", id)
	if old != nil {
		go r.drain(old)
	}
	return nil
}

func (r *Registry) drain(in *instance) {
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

// EnvStatus describes an environment instance.
type EnvStatus struct {
	Module   string         `json:"module"`
	InFlight int            `json:"inFlight"`
	Status   map[string]any `json:"status,omitempty"`
}

// Status reports the active environment (nil when none; then err says why)
// and the draining ones.
func (r *Registry) Status() (active *EnvStatus, draining []EnvStatus, setupErr string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	describe := func(in *instance) EnvStatus {
		st := EnvStatus{Module: in.id, InFlight: in.inflight}
		if s, ok := in.env.(module.Status); ok {
			st.Status = s.Status()
		}
		return st
	}
	if r.active != nil {
		a := describe(r.active)
		active = &a
	}
	draining = []EnvStatus{}
	for _, d := range r.draining {
		draining = append(draining, describe(d))
	}
	return active, draining, r.setupErr
}

// ModuleView is a module as listed by the API.
type ModuleView struct {
	Info    module.Info
	Enabled bool
	Active  bool
}

// Modules lists every module, sorted by id.
func (r *Registry) Modules(ctx context.Context) ([]ModuleView, error) {
	ids := make([]string, 0, len(r.infos))
	for id := range r.infos {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]ModuleView, 0, len(ids))
	for _, id := range ids {
		v, err := r.Module(ctx, id)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// Module describes one module.
func (r *Registry) Module(ctx context.Context, id string) (ModuleView, error) {
	info, ok := r.infos[id]
	if !ok {
		return ModuleView{}, fmt.Errorf("%s: %w", id, ErrUnknownModule)
	}
	m, err := r.stored(ctx, id)
	if err != nil {
		return ModuleView{}, err
	}
	r.mu.Lock()
	active := r.active != nil && r.active.id == id
	r.mu.Unlock()
	return ModuleView{Info: info, Enabled: m.Enabled, Active: active}, nil
}

// Shutdown kills every execution and tears every environment down, waiting
// no longer than ctx allows.
func (r *Registry) Shutdown(ctx context.Context) {
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
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		r.log.Error("environments still tearing down at the shutdown deadline", "err", ctx.Err())
	}
}
