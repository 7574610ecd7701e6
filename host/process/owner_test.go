package process

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/caller"
)

// keys are the callers the ownership tests play.
var (
	runnerA  = caller.With(context.Background(), caller.Caller{KeyID: "key_a", Roles: []caller.Role{caller.Runner}})
	runnerB  = caller.With(context.Background(), caller.Caller{KeyID: "key_b", Roles: []caller.Role{caller.Runner}})
	approver = caller.With(context.Background(), caller.Caller{KeyID: "key_approver", Roles: []caller.Role{caller.Approver}})
	admin    = caller.With(context.Background(), caller.Caller{KeyID: "bootstrap", Roles: []caller.Role{caller.Admin}})
)

// wantHidden fails unless err is the answer for a process that does not
// exist, word for word but the pid: nothing tells a key another key's
// process is there.
func wantHidden(t *testing.T, what string, err error, pid int64) {
	t.Helper()
	missing := fmt.Errorf("%w: %d", ErrNotFound, pid).Error()
	if !errors.Is(err, ErrNotFound) || err.Error() != missing {
		t.Errorf("%s of another key's process %d: %v, want %q as for a missing one", what, pid, err, missing)
	}
}

// everyAction is each thing a caller can do to a process by its pid, with
// what it answered.
func everyAction(m *Manager, ctx context.Context, pid int64) map[string]error {
	errs := map[string]error{}
	_, errs["get"] = m.Get(ctx, pid)
	_, errs["wait"] = m.Wait(ctx, pid, 0)
	_, errs["wait with a timeout"] = m.Wait(ctx, pid, 1)
	_, errs["kill"] = m.Kill(ctx, pid)
	_, errs["run"] = m.Run(ctx, pid, true)
	errs["delete"] = m.Delete(ctx, pid)
	_, _, stop, err := m.Follow(ctx, pid)
	stop()
	errs["follow"] = err
	_, errs["files"] = m.Files(ctx, pid)
	_, _, errs["file"] = m.File(ctx, pid, "out.txt")
	_, errs["displays"] = m.Displays(ctx, pid)
	return errs
}

// TestARunnerKeySeesOnlyItsOwnProcesses: a process is owned by the key
// that created it; another runner key finds it neither listed nor by pid,
// live or idle, whatever it asks (the same answer as for a pid that does
// not exist), while its owner, an approver and an admin see it.
func TestARunnerKeySeesOnlyItsOwnProcesses(t *testing.T) {
	t.Parallel()
	m, ex, _ := newManager(t)
	idle, err := m.Create(runnerA, CreateInput{Code: "x"})
	if err != nil {
		t.Fatal(err)
	}
	live, err := m.Create(runnerA, CreateInput{Code: "x", Autorun: true})
	if err != nil {
		t.Fatal(err)
	}
	<-ex.start
	theirs, err := m.Create(runnerB, CreateInput{Code: "x"})
	if err != nil {
		t.Fatal(err)
	}
	hosts, err := m.Create(context.Background(), CreateInput{Code: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if idle.Owner != "key_a" || live.Owner != "key_a" || theirs.Owner != "key_b" || hosts.Owner != "" {
		t.Fatalf("owners %q %q %q %q", idle.Owner, live.Owner, theirs.Owner, hosts.Owner)
	}
	if got := m.Owner(live.PID); got != "key_a" {
		t.Fatalf("owner of the live execution %q", got)
	}

	for _, p := range []*Process{idle, live, hosts} {
		for what, err := range everyAction(m, runnerB, p.PID) {
			wantHidden(t, what, err, p.PID)
		}
	}
	for what, err := range everyAction(m, runnerB, 999) {
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("%s of a missing process: %v", what, err)
		}
	}
	listed := func(ctx context.Context) string {
		t.Helper()
		ps, _, err := m.List(ctx, ListInput{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var pids []string
		for _, p := range ps {
			pids = append(pids, fmt.Sprint(p.PID))
		}
		return strings.Join(pids, " ")
	}
	for _, c := range []struct {
		name string
		ctx  context.Context
		want []int64
	}{
		{"runner A", runnerA, []int64{live.PID, idle.PID}},
		{"runner B", runnerB, []int64{theirs.PID}},
		{"an approver", approver, []int64{hosts.PID, theirs.PID, live.PID, idle.PID}},
		{"an admin", admin, []int64{hosts.PID, theirs.PID, live.PID, idle.PID}},
		{"the host", context.Background(), []int64{hosts.PID, theirs.PID, live.PID, idle.PID}},
	} {
		if got, want := listed(c.ctx), strings.Trim(fmt.Sprint(c.want), "[]"); got != want {
			t.Errorf("%s lists %q, want %q", c.name, got, want)
		}
	}

	// The control: what runner B was refused, the owner and the keys that
	// see everything are given.
	for _, ctx := range []context.Context{runnerA, approver, admin} {
		if p, err := m.Get(ctx, live.PID); err != nil || p.Owner != "key_a" {
			t.Fatalf("get of a visible process: %+v %v", p, err)
		}
		if _, err := m.Files(ctx, idle.PID); err != nil {
			t.Fatalf("files of a visible process: %v", err)
		}
		if _, _, stop, err := m.Follow(ctx, live.PID); err != nil {
			t.Fatalf("follow of a visible process: %v", err)
		} else {
			stop()
		}
	}
	if _, err := m.Kill(runnerA, live.PID); err != nil {
		t.Fatalf("the owner's kill: %v", err)
	}
	<-ex.kills
	ex.end <- module.Result{Exit: module.ExitCanceled}
	waitIdle(t, m, live.PID)
	if err := m.Delete(runnerA, idle.PID); err != nil {
		t.Fatalf("the owner's delete: %v", err)
	}
	if err := m.Delete(admin, theirs.PID); err != nil {
		t.Fatalf("an admin's delete: %v", err)
	}
}
