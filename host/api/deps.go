package api

import (
	"context"
	"io"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/audit"
	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/changes"
	"github.com/cyrnel/cyrnel/host/gate"
	"github.com/cyrnel/cyrnel/host/keys"
	"github.com/cyrnel/cyrnel/host/modules"
	"github.com/cyrnel/cyrnel/host/policy"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/services"
	"github.com/cyrnel/cyrnel/host/session"
	"github.com/cyrnel/cyrnel/host/store"
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
	Files(ctx context.Context, pid int64) ([]process.OutputFile, error)
	File(ctx context.Context, pid int64, path string) (size int64, content io.Reader, err error)
	Displays(ctx context.Context, pid int64) ([]process.Display, error)
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

// Tools lists, searches and switches the services' tools (host/services).
type Tools interface {
	Tools(ctx context.Context, in services.ToolListInput) ([]services.ToolSummary, bool, error)
	Search(ctx context.Context, in services.SearchInput) ([]services.ScoredTool, bool, error)
	Tool(ctx context.Context, serviceID, toolID string) (*services.Tool, error)
	SetToolEnabled(ctx context.Context, serviceID, toolID string, enabled bool) (*services.Tool, error)
}

// Gate calls a tool the way code does: policy, validation, audit, adapter
// (host/gate).
type Gate interface {
	Invoke(ctx context.Context, src gate.Source, in module.InvokeInput) (any, error)
}

// Policies are the tool policies (host/policy).
type Policies interface {
	Get() *policy.Set
	Put(ctx context.Context, s policy.Set) (*policy.Set, error)
	Decide(serviceID, toolID string) policy.Decision
}

// Approvals are the decisions calls under an ask policy wait on
// (host/approval).
type Approvals interface {
	List(ctx context.Context, in approval.ListInput) ([]approval.Approval, bool, error)
	Get(ctx context.Context, id string) (*approval.Approval, error)
	Decide(ctx context.Context, id string, approve bool) (*approval.Approval, error)
}

// ToolCalls is the audit of tool calls, newest first (host/audit).
type ToolCalls interface {
	List(ctx context.Context, f store.ToolCallFilter) ([]audit.Call, bool, error)
}

// Sessions are long-lived interpreters with their workspaces
// (host/session).
type Sessions interface {
	Create(ctx context.Context, in session.CreateInput) (*store.Session, error)
	List(ctx context.Context, f store.SessionFilter) ([]store.Session, error)
	Get(ctx context.Context, id string) (*store.Session, error)
	End(ctx context.Context, id string) error
	ListFiles(ctx context.Context, id string) ([]session.File, error)
	PutFile(ctx context.Context, id, path string, data []byte) error
	// OpenFile opens a file for streaming and says its size.
	OpenFile(ctx context.Context, id, path string) (io.Reader, int64, error)
	DeleteFile(ctx context.Context, id, path string) error
}

// settings are the config and write-only secrets of a module or a service:
// the same four operations on both.
type settings interface {
	Config(ctx context.Context, id string) (map[string]any, error)
	SetConfig(ctx context.Context, id string, cfg map[string]any) (map[string]any, error)
	SecretsSet(ctx context.Context, id string) ([]string, error)
	SetSecrets(ctx context.Context, id string, secrets map[string]any) ([]string, error)
}

// Readiness says whether the host can serve work now: nil, or what is
// wrong (host/server).
type Readiness interface {
	Ready(ctx context.Context) error
}

// Keys are the API keys: they authenticate requests and are made and
// revoked through the API (host/keys).
type Keys interface {
	Authenticate(ctx context.Context, key string) (caller.Caller, error)
	Create(ctx context.Context, in keys.CreateInput) (*keys.CreatedKey, error)
	List(ctx context.Context, in keys.ListInput) ([]keys.Key, bool, error)
	Get(ctx context.Context, id string) (*keys.Key, error)
	Revoke(ctx context.Context, id string) error
}

// Changes is the record of configuration changes, newest first
// (host/changes).
type Changes interface {
	List(ctx context.Context, in changes.ListInput) ([]changes.Change, bool, error)
}
