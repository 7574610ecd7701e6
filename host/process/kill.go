package process

import (
	"context"
	"fmt"
	"time"

	"github.com/cyrnel/cyrnel/host/store"
)

// Kill stops a queued or running process. A queued one is finished before
// Kill returns (idle, canceled); a running one is left terminating.
func (m *Manager) Kill(ctx context.Context, pid int64) (*Process, error) {
	r, err := m.live(ctx, pid)
	if err != nil {
		return nil, err
	}
	if r == nil {
		p, err := m.get(ctx, pid)
		if err != nil {
			return nil, err
		}
		if m.remote(p) {
			return m.killRemote(ctx, p)
		}
		return nil, conflict("process %d is %s", pid, p.State)
	}
	r.mu.Lock()
	was := r.state
	r.killed = true
	if was == Queued || was == Running || was == Suspended {
		r.state = Terminating
		r.publishLocked(Event{Type: EventState, State: Terminating})
	}
	r.mu.Unlock()
	r.cancel()
	if was == Queued || was == Running || was == Suspended {
		// From queued too: the running state is written at the next flush.
		p := &store.Process{PID: pid, Runs: r.base.Runs, State: string(Terminating)}
		if err := m.w.do(func(ctx context.Context, tx *store.Tx) error {
			_, err := tx.TransitionRun(ctx, p, []string{string(Queued), string(Running), string(Suspended)}, store.ProcState)
			return err
		}); err != nil {
			return nil, err
		}
	}
	if err := m.exec.Kill(ctx, pid); err != nil {
		return nil, fmt.Errorf("kill process %d: %w", pid, err)
	}
	if was == Queued {
		// A queued execution is dropped at once: answer with the final state.
		select {
		case <-r.done:
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
	return m.Get(ctx, pid)
}

// await waits up to timeout for a run to end and answers with its final
// row, held in memory, or with the process as it is then.
func (m *Manager) await(ctx context.Context, r *run, timeout time.Duration) (*Process, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-r.done:
		return r.final, nil
	case <-t.C:
	case <-ctx.Done():
	}
	return m.Get(ctx, r.pid)
}

// Wait blocks until the process is idle, the timeout passes or ctx ends,
// then returns it.
func (m *Manager) Wait(ctx context.Context, pid int64, timeout time.Duration) (*Process, error) {
	r, err := m.live(ctx, pid)
	if err != nil {
		return nil, err
	}
	if r != nil && timeout > 0 {
		return m.await(ctx, r, timeout)
	}
	if r == nil && timeout > 0 && m.relay != nil {
		p, err := m.get(ctx, pid)
		if err != nil || !m.remote(p) {
			return m.Get(ctx, pid)
		}
		if p, err = m.poll(ctx, pid, timeout, func(p *store.Process) bool { return p.State == string(Idle) }); err != nil {
			return nil, err
		}
		return m.view(p), nil
	}
	return m.Get(ctx, pid)
}
