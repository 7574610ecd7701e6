package session

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/store"
)

// live is a running session; its goroutine (own) alone touches the
// interpreter and row.
type live struct {
	mu    sync.Mutex // guards row for readers
	row   store.Session
	jobs  chan *job
	stop  chan string // a reason to end
	ctx   context.Context
	end   context.CancelFunc // after a reason is sent: stops the running execution
	done  chan struct{}
	ended bool   // under Manager.mu: no job may be queued any more
	last  func() // releases the result of the execution that ended the session
}

func (l *live) snapshot() store.Session {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.row
}

// job is one execution waiting for or running in a session.
type job struct {
	ctx   context.Context
	in    module.ExecutionInput
	op    func(context.Context, module.Session) error // a file request instead of an execution
	state atomic.Int32                                // jobWaiting, then jobClaimed (by the session) or jobDropped (by its caller)
	res   module.Result
	err   error
	done  chan struct{}
}

const (
	jobWaiting int32 = iota
	jobClaimed
	jobDropped
)

// ended reports whether a session's interpreter has ended.
func ended(ws module.Session) bool {
	select {
	case <-ws.Done():
		return true
	default:
		return false
	}
}

// own runs a session's executions until it ends, then closes its interpreter.
// The session's deadlines (d) are the manager's clock's: a timer wakes the
// goroutine at the nearer one, and the clock says whether it has passed,
// also when an execution arrives.
func (m *Manager) own(l *live, ws module.Session, d deadlines) {
	defer m.wg.Done()
	defer close(l.done)
	row := l.snapshot()
	clock := m.cfg.Now
	wake := time.NewTimer(d.next().Sub(clock()))
	defer wake.Stop()
	var late *job // arrived when the session's end was due: answered as the waiting ones are
	reason := ""
	for reason == "" {
		select {
		case j := <-l.jobs:
			if reason = d.passed(clock()); reason != "" {
				late = j
				continue
			}
			if !j.state.CompareAndSwap(jobWaiting, jobClaimed) {
				continue // killed while it waited
			}
			if j.op != nil {
				j.finish(module.Result{}, j.op(j.ctx, ws))
				if ended(ws) {
					reason = EndCrashed
				}
			} else if reason = m.run(l, ws, j); l.ctx.Err() != nil {
				reason = <-l.stop
			}
			d.idle = clock().Add(d.idleFor)
			wake.Reset(d.next().Sub(clock()))
		case <-wake.C:
			if reason = d.passed(clock()); reason == "" {
				wake.Reset(d.next().Sub(clock()))
			}
		case <-ws.Done():
			reason = EndCrashed
		case reason = <-l.stop:
		}
	}
	ws.Close()
	m.mu.Lock()
	l.ended = true
	delete(m.live, row.ID)
	m.mu.Unlock()
	final := l.snapshot()
	m.end(&final, reason, l)
	if l.last != nil {
		l.last()
	}
	// Nothing can be queued any more: what waits ends with the session.
	refuse := func(j *job) {
		if j.state.CompareAndSwap(jobWaiting, jobClaimed) {
			j.finish(module.Result{}, sessionEnded(final.ID, reason))
		}
	}
	if late != nil {
		refuse(late)
	}
	for {
		select {
		case j := <-l.jobs:
			refuse(j)
		default:
			return
		}
	}
}

// deadlines are when a session ends unless it is used (idle, idleFor after
// its last use) and when it ends anyway (life).
type deadlines struct {
	idleFor    time.Duration
	idle, life time.Time
}

// deadlines are a new session's: its idle time counts from now.
func (m *Manager) deadlines(row *store.Session) deadlines {
	d := deadlines{idleFor: time.Duration(row.IdleTimeoutMs) * time.Millisecond,
		life: row.CreatedAt.Add(time.Duration(row.MaxLifetimeMs) * time.Millisecond)}
	// Read without UTC, time.Now's reading keeps its monotonic part: the
	// idle deadline does not move when the wall clock is set.
	d.idle = m.cfg.Now().Add(d.idleFor)
	return d
}

func (d deadlines) next() time.Time {
	if d.life.Before(d.idle) {
		return d.life
	}
	return d.idle
}

// passed says which deadline has passed at now ("": neither).
func (d deadlines) passed(now time.Time) string {
	switch {
	case !now.Before(d.life):
		return EndMaxLifetime
	case !now.Before(d.idle):
		return EndIdleTimeout
	}
	return ""
}

func (j *job) finish(res module.Result, err error) {
	j.res, j.err = res, err
	close(j.done)
}

// run runs one execution and says why the session ends because of it ("":
// it does not).
func (m *Manager) run(l *live, ws module.Session, j *job) string {
	l.mu.Lock()
	l.row.State, l.row.LastUsedAt = string(Busy), m.now()
	row := l.row
	l.mu.Unlock()
	m.write(&row, store.SesState, store.SesLastUsedAt)
	// The execution stops when it is killed or the session is ended.
	ctx, cancel := context.WithCancel(j.ctx)
	stop := context.AfterFunc(l.ctx, cancel)
	res, clean := ws.Execute(ctx, j.in)
	stop()
	cancel()
	if l.ctx.Err() != nil && j.ctx.Err() == nil {
		// own reads the session's reason from stop.
		j.finish(module.Result{}, &endedError{"the session was ended while this execution ran"})
		return EndKilled
	}
	l.mu.Lock()
	l.row.State, l.row.LastUsedAt = string(Ready), m.now()
	if res.CPUMs > 0 {
		l.row.CPUMs = ptr(deref(l.row.CPUMs) + res.CPUMs)
	}
	if res.PeakMemoryBytes > 0 {
		l.row.MemoryBytes = ptr(max(deref(l.row.MemoryBytes), res.PeakMemoryBytes))
	}
	row = l.row
	l.mu.Unlock()
	if clean {
		m.write(&row, store.SesState, store.SesLastUsedAt, store.SesCPUMs, store.SesMemoryBytes)
		j.finish(res, nil)
		return ""
	}
	end := EndCrashed
	switch res.Reason {
	case module.ReasonMemoryLimit, module.ReasonCPULimit, module.ReasonOutputLimit, module.ReasonTimeout:
		end = string(res.Reason)
	case module.ReasonKilled:
		end = EndKilled
	}
	// The session is ended before the execution's result is released: a
	// client reading the result then sees the session ended, and the
	// result says so.
	why := &endedUnder{res: res, msg: fmt.Sprintf("session %s ended with this execution (%s): %s; start a new session", row.ID, end, endedWhy[end])}
	l.last = func() { j.finish(module.Result{}, why) }
	return end
}

// endedWhy explains each way an execution can end its session.
var endedWhy = map[string]string{
	EndKilled:                        "the program did not stop within the grace period after the kill, so its interpreter was killed",
	EndCrashed:                       "its interpreter died",
	string(module.ReasonMemoryLimit): "the interpreter reached the memory limit",
	string(module.ReasonCPULimit):    "the interpreter reached the CPU time limit",
	string(module.ReasonOutputLimit): "the program wrote past the output limit",
	string(module.ReasonTimeout):     "the program ran past its timeout and did not stop",
}

// endedUnder is an execution that ended its session: its own result, and
// why the session ended, which the process manager records as the error.
type endedUnder struct {
	res module.Result
	msg string
}

func (e *endedUnder) Error() string { return e.msg }

// Outcome is how the execution itself ended.
func (e *endedUnder) Outcome() module.Result { return e.res }
