package api

import (
	"context"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/modules"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/services"
)

// What the API serves, one interface per resource, so each resource's
// operations can be tested against a fake.

// Processes runs and keeps programs (host/process).
type Processes interface {
	Create(ctx context.Context, in process.CreateInput) (*process.Process, error)
	List(ctx context.Context, in process.ListInput) ([]process.ProcessSummary, bool, error)
	Get(ctx context.Context, pid int64) (*process.Process, error)
	Wait(ctx context.Context, pid int64, timeout time.Duration) (*process.Process, error)
	Kill(ctx context.Context, pid int64) (*process.Process, error)
	Run(ctx context.Context, pid int64, force bool) (*process.Process, error)
	Delete(ctx context.Context, pid int64) error
	Follow(ctx context.Context, pid int64) (replay []process.Event, next <-chan process.Event, stop func(), err error)
}

// Environment is the active environment and its switch (host/modules).
type Environment interface {
	Status() (active *modules.EnvStatus, draining []modules.EnvStatus, setupErr string)
	Activate(ctx context.Context, id string) error
	Active() (module.Environment, error)
}

// Modules lists modules and changes their settings (host/modules).
type Modules interface {
	settings
	Modules(ctx context.Context) ([]modules.ModuleView, error)
	Module(ctx context.Context, id string) (modules.ModuleView, error)
	SetEnabled(ctx context.Context, id string, enabled bool) (modules.ModuleView, error)
}

// Services imports services and changes their settings (host/services).
type Services interface {
	settings
	Create(ctx context.Context, in services.CreateInput) (*services.Service, error)
	List(ctx context.Context) ([]*services.Service, error)
	Get(ctx context.Context, id string) (*services.Service, error)
	SetEnabled(ctx context.Context, id string, enabled bool) (*services.Service, error)
	Delete(ctx context.Context, id string) error
	Refresh(ctx context.Context, id string) (*services.RefreshResult, error)
}

// Tools finds, switches and calls the services' tools (host/services).
type Tools interface {
	Tools(ctx context.Context, in services.ToolListInput) ([]services.ToolSummary, bool, error)
	Tool(ctx context.Context, serviceID, toolID string) (*services.Tool, error)
	SetToolEnabled(ctx context.Context, serviceID, toolID string, enabled bool) (*services.Tool, error)
	Invoke(ctx context.Context, in module.InvokeInput) (any, error)
}

// settings are the config and write-only secrets of a module or a service:
// the same four operations on both.
type settings interface {
	Config(ctx context.Context, id string) (map[string]any, error)
	SetConfig(ctx context.Context, id string, cfg map[string]any) (map[string]any, error)
	SecretsSet(ctx context.Context, id string) ([]string, error)
	SetSecrets(ctx context.Context, id string, secrets map[string]any) ([]string, error)
}
