package process

import (
	"context"
	"slices"
	"sync"

	"github.com/cyrnel/cyrnel/host/store"
)

// Suspend marks a running process suspended while one of its tool calls
// waits on the given approval, and tells its followers about the approval
// (followers that join later get it in their replay until it is decided).
// Calls nest: the process runs again when the last returned resume is
// called. A process that is not running (terminating, ended) stays so.
func (m *Manager) Suspend(pid int64, approval any) (resume func()) {
	r := m.lookup(pid)
	if r == nil {
		return func() {}
	}
	r.mu.Lock()
	r.suspends++
	changed := r.suspends == 1 && r.state == Running && !r.ended
	if changed {
		r.state = Suspended
		r.publishLocked(Event{Type: EventState, State: Suspended})
	}
	waiting := &Event{Type: EventApproval, Approval: approval}
	if !r.ended {
		r.publishLocked(*waiting)
		r.waiting = append(r.waiting, waiting)
	}
	r.mu.Unlock()
	if changed {
		m.writeLiveState(r)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			r.mu.Lock()
			r.waiting = slices.DeleteFunc(r.waiting, func(e *Event) bool { return e == waiting })
			r.suspends--
			changed := r.suspends == 0 && r.state == Suspended && !r.ended
			if changed {
				r.state = Running
				r.publishLocked(Event{Type: EventState, State: Running})
			}
			r.mu.Unlock()
			if changed {
				m.writeLiveState(r)
			}
		})
	}
}

// writeLiveState stores the run's current running or suspended state, so
// listings and a restarted host see it. Writes are ordered per run and
// each writes the state as it is then, so the last one is right; the
// compare-and-set never touches a final or terminating row, nor the row of
// a later run of the process.
func (m *Manager) writeLiveState(r *run) {
	r.stateMu.Lock()
	defer r.stateMu.Unlock()
	r.mu.Lock()
	state, started := r.state, r.startedAt
	r.mu.Unlock()
	if state != Running && state != Suspended {
		return
	}
	p := &store.Process{PID: r.pid, Runs: r.base.Runs, State: string(state), StartedAt: &started}
	err := m.w.do(func(ctx context.Context, tx *store.Tx) error {
		_, err := tx.TransitionRun(ctx, p, []string{string(Queued), string(Running), string(Suspended)}, store.ProcState, store.ProcStartedAt)
		return err
	})
	if err != nil {
		m.log.ErrorContext(r.logContext(), "record process state", "pid", r.pid, "state", state, "err", err)
		return
	}
	r.mu.Lock()
	r.saved.running = true
	r.mu.Unlock()
}
