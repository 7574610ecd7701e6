package server

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/cluster"
	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/modules"
	"github.com/cyrnel/cyrnel/host/policy"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/services"
	"github.com/cyrnel/cyrnel/host/session"
	"github.com/cyrnel/cyrnel/host/store"
)

// clusterHandlers is what this host does for the others: apply their
// configuration changes, kill what it runs for them, finish what lost
// hosts left running.
func clusterHandlers(st *store.Store, procs *process.Manager, sessions *session.Manager, approvals *approval.Manager, policies *policy.Engine, reg *modules.Registry, svcs *services.Manager) cluster.Handlers {
	reload := func(ctx context.Context, ev control.Event) error {
		switch ev.Kind {
		case control.KindService:
			return svcs.Reload(ctx, ev)
		case control.KindPolicies:
			return policies.Reload(ctx)
		}
		return reg.Reload(ctx, ev)
	}
	return cluster.Handlers{
		Config:   reload,
		Versions: func(ctx context.Context) (map[control.Event]string, error) { return configVersions(ctx, st) },
		Kill:     procs.KillLocal,
		Decided:  approvals.Wake,
		Recheck:  approvals.Recheck,
		Lost: func(ctx context.Context) (int64, error) {
			n, err := procs.FinishLost(ctx)
			if errors.Is(err, process.ErrConflict) {
				return n, nil // this host is shutting down: the others will do it
			}
			if err != nil {
				return n, fmt.Errorf("finish lost hosts' processes: %w", err)
			}
			if _, err := sessions.FinishLost(ctx); err != nil {
				return n, err
			}
			return n, approvals.ExpireOrphans(ctx)
		},
	}
}

// configVersions names the stored configuration's pieces as the events that
// reload them: a module, a service, the active environment, the policies.
func configVersions(ctx context.Context, st *store.Store) (map[control.Event]string, error) {
	raw, err := st.ConfigVersions(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[control.Event]string, len(raw))
	for key, v := range raw {
		kind, id, _ := strings.Cut(key, "/")
		switch {
		case kind == "module":
			out[control.Event{Kind: control.KindModule, ID: id}] = v
		case kind == "service":
			out[control.Event{Kind: control.KindService, ID: id}] = v
		case key == "setting/"+modules.ActiveSetting:
			out[control.Event{Kind: control.KindEnvironment}] = v
		case key == "setting/"+policy.Setting:
			out[control.Event{Kind: control.KindPolicies}] = v
		}
	}
	return out, nil
}

// peers are the other hosts on the database, as the API forwards to them.
type peers struct {
	st   *store.Store
	self string
}

func (p peers) Self() string { return p.self }

func (p peers) Address(ctx context.Context, hostID string) (string, error) {
	return p.st.HostAddress(ctx, hostID)
}

// pendingApprovals are the approvals an execution's calls wait on, for the
// follows of executions other hosts run.
type pendingApprovals struct{ *approval.Manager }

func (a pendingApprovals) Pending(ctx context.Context, pid int64) ([]process.Waiting, error) {
	list, _, err := a.List(ctx, approval.ListInput{State: approval.Pending, PID: pid, Limit: 100})
	if err != nil {
		return nil, err
	}
	out := make([]process.Waiting, len(list))
	for i := range list {
		out[i] = process.Waiting{ID: list[i].ID, View: &list[i]}
	}
	return out, nil
}
