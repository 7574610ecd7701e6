package process

import (
	"context"
	"errors"
	"fmt"

	"github.com/cyrnel/cyrnel/host/caller"

	"github.com/cyrnel/cyrnel/host/store"
)

// Get returns a process; while it runs, with what it has produced so far.
func (m *Manager) Get(ctx context.Context, pid int64) (*Process, error) {
	p, err := m.get(ctx, pid)
	if err != nil {
		return nil, err
	}
	return m.view(p), nil
}

// get reads a process the caller ctx carries may see: a runner's key sees
// only the processes it owns, and one it does not own is not found, as a
// missing one is (no answer tells it the process exists).
func (m *Manager) get(ctx context.Context, pid int64) (*store.Process, error) {
	p, err := m.st.GetProcess(ctx, pid)
	if errors.Is(err, store.ErrNotFound) || (err == nil && !caller.Sees(ctx, p.Owner)) {
		return nil, notFound(pid)
	}
	return p, err
}

func notFound(pid int64) error { return fmt.Errorf("%w: %d", ErrNotFound, pid) }

// live returns the run of pid on this host (nil: none), or ErrNotFound
// when the caller ctx carries may not see it, as get.
func (m *Manager) live(ctx context.Context, pid int64) (*run, error) {
	r := m.lookup(pid)
	if r != nil && !caller.Sees(ctx, r.base.Owner) {
		return nil, notFound(pid)
	}
	return r, nil
}

// Owner is the key id that owns pid's execution running here ("": none,
// or not running here): whose a tool call of the program is.
func (m *Manager) Owner(pid int64) string {
	if r := m.lookup(pid); r != nil {
		return r.base.Owner
	}
	return ""
}

// view overlays the live state of a running process on its stored row.
func (m *Manager) view(p *store.Process) *Process {
	m.mu.Lock()
	r := m.runs[p.PID]
	m.mu.Unlock()
	v := viewOf(p)
	if r != nil {
		r.overlay(v)
	}
	return v
}

// ListInput filters and pages a listing.
type ListInput struct {
	State, ExitState, Ref string
	BeforePID             int64
	Limit                 int
}

// List returns processes newest first and whether more follow: for a
// runner's key, only those it owns.
func (m *Manager) List(ctx context.Context, in ListInput) ([]ProcessSummary, bool, error) {
	owner, scoped := caller.Scope(ctx)
	if scoped && owner == "" {
		return nil, false, nil // a key without an id owns nothing
	}
	ps, err := m.st.ListProcesses(ctx, store.ProcessFilter{
		State: in.State, ExitState: in.ExitState, Ref: in.Ref, Owner: owner, BeforePID: in.BeforePID, Limit: int64(in.Limit) + 1,
	})
	if err != nil {
		return nil, false, err
	}
	more := len(ps) > in.Limit
	if more {
		ps = ps[:in.Limit]
	}
	out := make([]ProcessSummary, len(ps))
	for i := range ps {
		out[i] = m.view(&ps[i]).ProcessSummary // live state over stored rows
	}
	return out, more, nil
}
