package modules

import (
	"context"
	"slices"
	"sort"

	"github.com/cyrnel/cyrnel/envs/module"
)

// EnvStatus describes an environment instance.
type EnvStatus struct {
	Module   string
	InFlight int
	Status   map[string]any
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

// pooled is an environment with warm workers.
type pooled interface{ Workers() module.WorkerCounts }

// EnvWorkers are an environment instance's workers.
type EnvWorkers struct {
	Module string
	module.WorkerCounts
}

// Workers counts the workers of the active and draining environments, by
// module (a draining instance adds to the active one of its module).
func (r *Registry) Workers() []EnvWorkers {
	r.mu.Lock()
	insts := append([]*instance{}, r.draining...)
	if r.active != nil {
		insts = append(insts, r.active)
	}
	r.mu.Unlock()
	var out []EnvWorkers
	for _, in := range insts {
		p, ok := in.env.(pooled)
		if !ok {
			continue
		}
		c := p.Workers()
		i := slices.IndexFunc(out, func(w EnvWorkers) bool { return w.Module == in.id })
		if i < 0 {
			out = append(out, EnvWorkers{Module: in.id, WorkerCounts: c})
			continue
		}
		out[i].Ready += c.Ready
		out[i].Starting += c.Starting
		out[i].Busy += c.Busy
		out[i].TemplateRestarts += c.TemplateRestarts
	}
	return out
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
		return ModuleView{}, unknownModule(id, r.infos)
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
