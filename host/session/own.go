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
func (m *Manager) own(l *live, ws module.Session) {
	defer m.wg.Done()
	defer close(l.done)
	row := l.snapshot()
	idle := time.NewTimer(time.Duration(row.IdleTimeoutMs) * time.Millisecond)
	defer idle.Stop()
	life := time.NewTimer(time.Until(row.CreatedAt.Add(time.Duration(row.MaxLifetimeMs) * time.Millisecond)))
	defer life.Stop()
	reason := ""
	for reason == "" {
		select {
		case j := <-l.jobs:
			if !j.state.CompareAndSwap(jobWaiting, jobClaimed) {
				continue // killed while it waited
			}
			if j.op != nil {
				j.finish(module.Result{}, j.op(j.ctx, ws))
				if ended(ws) {
					reason = EndCrashed
				}
				idle.Reset(time.Duration(row.IdleTimeoutMs) * time.Millisecond)
				continue
			}
			reason = m.run(l, ws, j)
			if l.ctx.Err() != nil {
				reason = <-l.stop
			}
			idle.Reset(time.Duration(row.IdleTimeoutMs) * time.Millisecond)
		case <-idle.C:
			reason = EndIdleTimeout
		case <-life.C:
			reason = EndMaxLifetime
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
	for {
		select {
		case j := <-l.jobs:
			if j.state.CompareAndSwap(jobWaiting, jobClaimed) {
				j.finish(module.Result{}, sessionEnded(final.ID, reason))
			}
		default:
			return
		}
	}
}

func (j *job) finish(res module.Result, err error) {
	j.res, j.err = res, err
	close(j.done)
}

// run runs one execution and says why the session ends because of it ("":
// it does not).
func (m *Manager) run(l *live, ws module.Session, j *job) string {
	l.mu.Lock()
	l.row.State, l.row.LastUsedAt = string(Busy), time.Now().UTC()
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
	l.row.State, l.row.LastUsedAt = string(Ready), time.Now().UTC()
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
