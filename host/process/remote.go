package process

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/store"
)

// Relay carries a kill to the host that runs an execution, when several
// hosts share one PostgreSQL database; one host has none.
type Relay interface {
	Kill(ctx context.Context, hostID string, pid int64) error
}

// remotePoll is how often an execution another host runs is read back while
// it is waited on or followed: the runner writes its progress every
// FlushInterval, so reading more often would only repeat it.
const remotePoll = 250 * time.Millisecond

// remoteKillWait bounds how long a kill through this host waits for the
// runner to mark the execution terminating.
const remoteKillWait = 5 * time.Second

// Waiting is an approval a tool call of an execution waits on: its id and
// the view an approval event carries.
type Waiting struct {
	ID   string
	View any
}

// Approvals lists the approvals an execution's calls wait on, read from the
// database: a follow of an execution another host runs tells them as
// approval events, as a follow on the runner does.
type Approvals interface {
	Pending(ctx context.Context, pid int64) ([]Waiting, error)
}

// unsent reads the approvals pid's calls wait on that were not sent yet
// and marks them sent (none on a failure: the next poll reads them again).
func (m *Manager) unsent(ctx context.Context, pid int64, sent map[string]bool) []Event {
	if m.approvals == nil {
		return nil
	}
	ws, err := m.approvals.Pending(ctx, pid)
	if err != nil {
		m.log.Debug("read the approvals a remote execution waits on", "pid", pid, "err", err)
		return nil
	}
	var out []Event
	for _, w := range ws {
		if !sent[w.ID] {
			sent[w.ID] = true
			out = append(out, Event{Type: EventApproval, Approval: w.View})
		}
	}
	return out
}

// remote reports whether p is live on another host.
func (m *Manager) remote(p *store.Process) bool {
	return m.relay != nil && p.State != string(Idle) && p.HostID != m.host
}

// poll reads pid's row every remotePoll until done says so, timeout passes
// or ctx ends, and returns the last row read. A database that cannot answer
// for a while is read again at the next tick: a wait or a follow outlives
// the blip.
func (m *Manager) poll(ctx context.Context, pid int64, timeout time.Duration, done func(*store.Process) bool) (*store.Process, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(remotePoll)
	defer tick.Stop()
	var last *store.Process
	for {
		p, err := m.get(ctx, pid)
		switch {
		case err != nil && store.Unavailable(err) && last != nil:
			p = last
		case err != nil || done(p):
			return p, err
		}
		last = p
		select {
		case <-tick.C:
		case <-deadline.C:
			return p, nil
		case <-ctx.Done():
			return p, nil
		}
	}
}

// killRemote asks the runner of p to kill it and waits (a while) until its
// row says terminating or idle. A runner that is gone cannot answer: its
// execution is left to the lease (host_lost).
func (m *Manager) killRemote(ctx context.Context, p *store.Process) (*Process, error) {
	if err := m.relay.Kill(ctx, p.HostID, p.PID); err != nil {
		return nil, fmt.Errorf("kill process %d on host %s: %w", p.PID, p.HostID, err)
	}
	p, err := m.poll(ctx, p.PID, remoteKillWait, func(p *store.Process) bool {
		return p.State == string(Idle) || p.State == string(Terminating)
	})
	if err != nil {
		return nil, err
	}
	return viewOf(p), nil
}

// followRemote follows p, live on another host, from its row: what the row
// gains is sent as events, ending with exit once it is idle. What is sent is
// bounded by what the runner stores (its streams and output are capped).
func (m *Manager) followRemote(ctx context.Context, p *store.Process) (replay []Event, next <-chan Event, stop func()) {
	v := viewOf(p)
	replay = replayOf(v, p.Displays)
	// A suspended execution waits on approvals: they are replayed, and
	// each new one is sent as it appears, while it is suspended.
	sent := map[string]bool{}
	if v.State == Suspended {
		replay = append(replay, m.unsent(ctx, p.PID, sent)...)
	}
	ctx, cancel := context.WithCancel(ctx)
	stopped := context.AfterFunc(m.ctx, cancel) // shutdown ends every follow
	ch := make(chan Event, followBuffer)
	go func() {
		defer close(ch)
		defer stopped()
		last, shown := v, len(p.Displays)
		send := func(ev Event) bool {
			select {
			case ch <- ev:
				return true
			case <-ctx.Done():
				return false
			}
		}
		for {
			var waiting []Event
			p, err := m.poll(ctx, last.PID, time.Hour, func(p *store.Process) bool {
				if p.State == string(Suspended) && p.Runs == last.Runs {
					waiting = append(waiting, m.unsent(ctx, p.PID, sent)...)
				}
				return changed(last, p) || len(waiting) > 0
			})
			if err != nil || ctx.Err() != nil {
				return
			}
			now := viewOf(p)
			if now.Runs != last.Runs {
				// Re-run since: this follow was of the execution that ended.
				return
			}
			if len(now.Stdout) > len(last.Stdout) && !send(Event{Type: EventStdout, Text: now.Stdout[len(last.Stdout):]}) {
				return
			}
			if len(now.Stderr) > len(last.Stderr) && !send(Event{Type: EventStderr, Text: now.Stderr[len(last.Stderr):]}) {
				return
			}
			if !reflect.DeepEqual(now.Output, last.Output) && !send(Event{Type: EventOutput, Output: now.Output}) {
				return
			}
			// Displays the row gained since, in their order (sent as the
			// row changes, and all of them before exit).
			for _, d := range displayViews(p.Displays)[min(shown, len(p.Displays)):] {
				if !send(Event{Type: EventDisplay, Display: &d}) {
					return
				}
			}
			shown = max(shown, len(p.Displays))
			if now.State != last.State && now.State != Idle && !send(Event{Type: EventState, State: now.State}) {
				return
			}
			for _, ev := range waiting {
				if !send(ev) {
					return
				}
			}
			if now.State == Idle {
				send(Event{Type: EventExit, Process: now})
				return
			}
			last = now
		}
	}()
	return replay, ch, cancel
}

// changed reports whether the row p differs from what was last sent.
func changed(last *Process, p *store.Process) bool {
	return string(last.State) != p.State || p.Runs != last.Runs || len(p.Stdout) != len(last.Stdout) ||
		len(p.Stderr) != len(last.Stderr) || !reflect.DeepEqual(outputOf(p), last.Output)
}

func outputOf(p *store.Process) map[string]any {
	if p.Output == nil {
		return map[string]any{}
	}
	return p.Output
}

// FinishLost finishes, as failed with reason host_lost, the live processes
// of every other host whose lease ran out. Any live host may run it; the
// write is a compare-and-set on live states, so doing it twice is harmless.
func (m *Manager) FinishLost(ctx context.Context) (int64, error) {
	var n int64
	err := m.w.do(func(ctx context.Context, tx *store.Tx) (err error) {
		n, err = tx.FinishLost(ctx, m.host, live, string(module.ExitFailed), string(module.ReasonHostLost),
			"the host running this process stopped renewing its lease")
		return err
	})
	if n > 0 {
		m.log.Warn("finished processes of a lost host", "count", n)
	}
	return n, err
}

// KillLocal kills pid if this host runs it (a kill relayed from another
// host); it is not found otherwise.
func (m *Manager) KillLocal(ctx context.Context, pid int64) error {
	if m.lookup(pid) == nil {
		return fmt.Errorf("%w: %d not running here", ErrNotFound, pid)
	}
	_, err := m.Kill(ctx, pid)
	return err
}
