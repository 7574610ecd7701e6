package api

import (
	"context"
	"fmt"
	"slices"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/modules"
)

// fakeEnv is an active environment that writes docs; the rest of
// module.Environment is never called by the API.
type fakeEnv struct {
	module.Environment
	docsErr error
	docsFor module.ToolDocsInput
}

func (e *fakeEnv) Docs(context.Context) (string, error) { return "# Writing programs", e.docsErr }

func (e *fakeEnv) ToolDocs(_ context.Context, in module.ToolDocsInput) (string, error) {
	e.docsFor = in
	return "## " + in.ServiceID + "." + in.ToolID, e.docsErr
}

type fakeEnvironment struct {
	active    *modules.EnvStatus
	draining  []modules.EnvStatus
	setupErr  string
	env       *fakeEnv
	err       error
	activated string
}

func (f *fakeEnvironment) Status() (*modules.EnvStatus, []modules.EnvStatus, string) {
	return f.active, f.draining, f.setupErr
}

func (f *fakeEnvironment) Activate(_ context.Context, id string) error {
	f.activated = id
	if f.err != nil {
		return f.err
	}
	f.active = &modules.EnvStatus{Module: id}
	return nil
}

func (f *fakeEnvironment) Active() (module.Environment, error) {
	if f.env == nil {
		return nil, modules.ErrNoEnvironment
	}
	return f.env, nil
}

// fakeSettings keeps configs and secrets by id.
type fakeSettings struct {
	configs map[string]map[string]any
	secrets map[string][]string
	err     error
}

func (f *fakeSettings) Config(_ context.Context, id string) (map[string]any, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.configs[id], nil
}

func (f *fakeSettings) SetConfig(_ context.Context, id string, cfg map[string]any) (map[string]any, error) {
	if f.err != nil {
		return nil, f.err
	}
	if f.configs == nil {
		f.configs = map[string]map[string]any{}
	}
	f.configs[id] = cfg
	return cfg, nil
}

func (f *fakeSettings) SecretsSet(_ context.Context, id string) ([]string, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.secrets[id], nil
}

func (f *fakeSettings) SetSecrets(_ context.Context, id string, sec map[string]any) ([]string, error) {
	if f.err != nil {
		return nil, f.err
	}
	set := []string{}
	for k := range sec {
		set = append(set, "/"+k)
	}
	slices.Sort(set)
	return set, nil
}

type fakeModules struct {
	fakeSettings
	views []modules.ModuleView
}

func (f *fakeModules) Modules(context.Context) ([]modules.ModuleView, error) { return f.views, f.err }

func (f *fakeModules) Module(_ context.Context, id string) (modules.ModuleView, error) {
	if f.err != nil {
		return modules.ModuleView{}, f.err
	}
	for _, v := range f.views {
		if v.Info.ID == id {
			return v, nil
		}
	}
	return modules.ModuleView{}, fmt.Errorf("%s: %w", id, modules.ErrUnknownModule)
}

func (f *fakeModules) SetEnabled(ctx context.Context, id string, enabled bool) (modules.ModuleView, error) {
	v, err := f.Module(ctx, id)
	v.Enabled = enabled
	return v, err
}
