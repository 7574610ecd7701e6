package server

import (
	"context"
	"errors"
	"fmt"

	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/cluster"
	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/modules"
	"github.com/cyrnel/cyrnel/host/policy"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/services"
)

// clusterHandlers is what this host does for the others: apply their
// configuration changes, kill what it runs for them, finish what lost
// hosts left running.
func clusterHandlers(procs *process.Manager, approvals *approval.Manager, policies *policy.Engine, reg *modules.Registry, svcs *services.Manager) cluster.Handlers {
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
		Config: reload,
		Resync: func(ctx context.Context) error {
			errs := []error{policies.Reload(ctx)}
			errs = append(errs, reg.Reload(ctx, control.Event{Kind: control.KindEnvironment}))
			mods, err := reg.Modules(ctx)
			errs = append(errs, err)
			for _, m := range mods {
				errs = append(errs, reg.Reload(ctx, control.Event{Kind: control.KindModule, ID: m.Info.ID}))
			}
			svs, err := svcs.List(ctx)
			errs = append(errs, err)
			for _, s := range svs {
				errs = append(errs, svcs.Reload(ctx, control.Event{Kind: control.KindService, ID: s.ID}))
			}
			return errors.Join(errs...)
		},
		Kill:    procs.KillLocal,
		Decided: approvals.Wake,
		Lost: func(ctx context.Context) (int64, error) {
			n, err := procs.FinishLost(ctx)
			if errors.Is(err, process.ErrConflict) {
				return n, nil // this host is shutting down: the others will do it
			}
			if err != nil {
				return n, fmt.Errorf("finish lost hosts' processes: %w", err)
			}
			return n, approvals.ExpireOrphans(ctx)
		},
	}
}
