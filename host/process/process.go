// Package process runs the host side of cyrnel processes: stored code plus
// its latest execution, moved through idle → queued → running →
// (terminating) → idle by compare-and-set writes, so a late event can never
// overwrite a final state.
package process

import (
	"context"
	"errors"
	"fmt"
	"github.com/cyrnel/cyrnel/host/schema"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/store"
)

// State is a host-side process state.
type State string

const (
	Idle        State = "idle"
	Queued      State = "queued"
	Running     State = "running"
	Terminating State = "terminating"
	// Suspended: running, but a tool call waits on a human approval.
	Suspended State = "suspended"
)

var live = []string{string(Queued), string(Running), string(Suspended), string(Terminating)}

// Errors the API maps to statuses.
var (
	ErrNotFound = errors.New("process not found")
	ErrConflict = errors.New("conflict")
)

// conflictError is an ErrConflict with its own message.
type conflictError struct{ msg string }

func (e *conflictError) Error() string { return e.msg }
func (e *conflictError) Unwrap() error { return ErrConflict }

func conflict(format string, args ...any) error {
	return &conflictError{fmt.Sprintf(format, args...)}
}

// Executor runs executions: the module registry.
type Executor interface {
	Execute(ctx context.Context, in module.ExecutionInput) (envID string, res module.Result, err error)
	Kill(ctx context.Context, eid int64) error
}

// Limits bound what one process may hold.
type Limits struct {
	OutputBytes      int64 // per stream (stdout, stderr) and for the structured output
	CodeBytes        int
	DefaultTimeoutMs int64
	MaxTimeoutMs     int64
}

// DefaultLimits are the documented defaults.
func DefaultLimits() Limits {
	return Limits{OutputBytes: 1 << 20, CodeBytes: 256 << 10, DefaultTimeoutMs: module.DefaultTimeoutMs, MaxTimeoutMs: 24 * 3600 * 1000}
}

// Manager owns the processes.
type Manager struct {
	log    *slog.Logger
	host   string // this host's id, recorded on the processes it runs
	st     *store.Store
	exec   Executor
	limits Limits

	ctx      context.Context // cancelled at shutdown: kills every execution
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	mu       sync.Mutex
	runs     map[int64]*run
	stopping bool

	liveWriteDelay time.Duration // the constant liveWriteDelay, but for tests
}

// New returns a manager for the host with the given id; call Recover before
// serving.
func New(log *slog.Logger, st *store.Store, exec Executor, limits Limits, hostID string) *Manager {
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{log: log, host: hostID, st: st, exec: exec, limits: limits, ctx: ctx, cancel: cancel, runs: map[int64]*run{},
		liveWriteDelay: liveWriteDelay}
}

// Recover finishes what a previous host left looking alive.
func (m *Manager) Recover(ctx context.Context) error {
	n, err := m.st.FinishAll(ctx, m.host, live, string(module.ExitFailed), string(module.ReasonHostRestart),
		"the host stopped while this process was running", time.Now().UTC())
	if err != nil {
		return err
	}
	if n > 0 {
		m.log.Warn("finished processes left running by a previous host", "count", n)
	}
	return nil
}

// CreateInput is a new process.
type CreateInput struct {
	Code      string
	Ref       string
	TimeoutMs int64 // 0: the default
	EnvConfig map[string]any
	Autorun   bool
	// Wait, with Autorun: return once the process is idle or this passes.
	Wait time.Duration
}

// Create stores a process and, with Autorun, starts it.
func (m *Manager) Create(ctx context.Context, in CreateInput) (*Process, error) {
	for field, v := range map[string]string{"body.code": in.Code, "body.ref": in.Ref} {
		if strings.ContainsRune(v, 0) {
			return nil, &schema.FieldError{Field: field, Message: "contains a NUL character"}
		}
	}
	if len(in.Code) > m.limits.CodeBytes {
		return nil, &schema.FieldError{Field: "body.code", Message: fmt.Sprintf("code is %d bytes, more than the limit of %d", len(in.Code), m.limits.CodeBytes)}
	}
	if in.TimeoutMs == 0 {
		in.TimeoutMs = m.limits.DefaultTimeoutMs
	}
	if in.TimeoutMs < 1 || in.TimeoutMs > m.limits.MaxTimeoutMs {
		return nil, &schema.FieldError{Field: "body.timeoutMs", Message: fmt.Sprintf("must be between 1 and %d", m.limits.MaxTimeoutMs)}
	}
	p := &store.Process{
		Ref: in.Ref, Code: in.Code, State: string(Idle), TimeoutMs: in.TimeoutMs,
		EnvConfig: in.EnvConfig, CreatedAt: time.Now().UTC(), HostID: m.host,
	}
	if in.Autorun {
		// Inserted already queued: one write fewer on the hot path.
		p.State, p.Runs = string(Queued), 1
	}
	m.mu.Lock()
	stopping := m.stopping
	m.mu.Unlock()
	if stopping && in.Autorun {
		return nil, conflict("the host is shutting down")
	}
	if in.Autorun && in.Wait > 0 {
		pid, ok, err := m.st.ReservePID(ctx)
		if err != nil {
			return nil, err
		}
		if ok {
			// Started before its row is written, so a short execution is
			// stored by one write, its final row: the row is inserted
			// earlier only if the execution lasts (liveWriteDelay) or the
			// wait ends first. Nobody knows the pid before Create returns.
			p.PID = pid
			return m.await(ctx, m.launch(p, true), in.Wait)
		}
	}
	if err := m.st.InsertProcess(ctx, p); err != nil {
		return nil, err
	}
	if !in.Autorun {
		return m.view(p), nil
	}
	m.launch(p, false)
	if in.Wait > 0 {
		return m.Wait(ctx, p.PID, in.Wait)
	}
	return m.view(p), nil
}

// await waits for a run whose row may not be stored yet, and stores it
// before returning if it is still live, so the pid it hands out can be read.
func (m *Manager) await(ctx context.Context, r *run, wait time.Duration) (*Process, error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-r.done:
		return r.result()
	case <-t.C:
	case <-ctx.Done():
	}
	ctx = context.WithoutCancel(ctx)
	if _, err := m.save(ctx, r, true); err != nil {
		return nil, err
	}
	return m.Get(ctx, r.pid)
}

// errNotStored is the answer about a process whose row could not be written.
var errNotStored = errors.New("the host could not store the process")

// Run starts a stored process again. Existing results need force.
func (m *Manager) Run(ctx context.Context, pid int64, force bool) (*Process, error) {
	p, err := m.get(ctx, pid)
	if err != nil {
		return nil, err
	}
	if p.State != string(Idle) {
		return nil, conflict("process %d is %s, not idle", pid, p.State)
	}
	if p.ExitState != nil && !force {
		return nil, conflict("process %d already ran (exit state %s); pass force to run it again", pid, *p.ExitState)
	}
	m.mu.Lock()
	_, busy := m.runs[pid]
	stopping := m.stopping
	m.mu.Unlock()
	if busy || stopping {
		return nil, conflict("process %d is still stopping", pid)
	}
	p.State, p.ExitState, p.Reason, p.Error = string(Queued), nil, "", ""
	p.Output, p.Stdout, p.Stderr, p.StdoutTruncated, p.StderrTruncated, p.OutputTruncated = nil, "", "", false, false, false
	p.StartedAt, p.FinishedAt, p.DurationMs, p.Environment = nil, nil, nil, ""
	p.Runs, p.HostID = p.Runs+1, m.host
	ok, err := m.st.TransitionProcess(ctx, p, []string{string(Idle)}, "state", "exit_state", "reason", "error",
		"output", "stdout", "stderr", "stdout_truncated", "stderr_truncated", "output_truncated", "started_at", "finished_at",
		"duration_ms", "environment", "runs", "host_id")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, conflict("process %d changed state", pid)
	}
	m.launch(p, false)
	return m.view(p), nil
}

// launch starts the execution of a process stored as queued or, unsaved, of
// one whose row is written when it ends or lasts.
func (m *Manager) launch(p *store.Process, unsaved bool) *run {
	r := newRun(p, m.limits.OutputBytes)
	r.unsaved = unsaved
	// Its own context: a kill cancels it, so a kill that arrives before the
	// environment has even seen the execution is not lost.
	ctx, cancel := context.WithCancel(m.ctx)
	r.cancel = cancel
	m.mu.Lock()
	if m.stopping {
		// Shutdown began after the caller checked: end it as Shutdown ends
		// the rest (its wait may be over already).
		m.mu.Unlock()
		cancel()
		m.finish(r, "", module.Result{Exit: module.ExitCanceled}, nil)
		return r
	}
	m.runs[p.PID] = r
	m.wg.Add(1)
	if unsaved {
		m.wg.Add(1)
		r.saveTimer = time.AfterFunc(m.liveWriteDelay, func() {
			defer m.wg.Done()
			if _, err := m.save(context.Background(), r, false); err != nil {
				m.log.Error("record process", "pid", r.pid, "err", err)
			}
		})
	}
	m.mu.Unlock()
	go func() {
		defer m.wg.Done()
		defer cancel()
		in := module.ExecutionInput{
			EID: p.PID, Code: p.Code, EnvConfig: p.EnvConfig,
			Options: module.Options{TimeoutMs: p.TimeoutMs, OutputLimitBytes: m.limits.OutputBytes},
		}
		envID, res, err := m.exec.Execute(ctx, in)
		// The result is final once Execute returns: from here on the
		// environment's reports are late and ignored.
		r.mu.Lock()
		r.ended = true
		r.mu.Unlock()
		m.finish(r, envID, res, err)
	}()
	return r
}

// save inserts the row of an unsaved run with its live state, and reports
// whether it did (false: the row was stored already). With drop, a failed
// insert also kills the run and keeps it from ever being stored: its client
// is told it failed, so it must not run on.
func (m *Manager) save(ctx context.Context, r *run, drop bool) (bool, error) {
	r.saveMu.Lock()
	defer r.saveMu.Unlock()
	r.mu.Lock()
	lost := r.lost
	r.mu.Unlock()
	if lost != nil {
		// It ended first, and its final row could not be written either.
		return false, fmt.Errorf("%w: %w", errNotStored, lost)
	}
	if !r.unsaved || r.dropped {
		return false, nil
	}
	r.mu.Lock()
	p := r.base
	p.State = string(r.state)
	if !r.startedAt.IsZero() {
		started := r.startedAt
		p.StartedAt = &started
	}
	r.mu.Unlock()
	if err := m.st.InsertProcess(ctx, &p); err != nil {
		if drop {
			r.dropped = true
			r.mu.Lock()
			r.killed = true
			r.mu.Unlock()
			r.cancel()
			if kerr := m.exec.Kill(ctx, r.pid); kerr != nil {
				m.log.Warn("kill a process that could not be stored", "pid", r.pid, "err", kerr)
			}
		}
		return false, fmt.Errorf("%w: %w", errNotStored, err)
	}
	r.unsaved = false
	return true, nil
}

func (m *Manager) finish(r *run, envID string, res module.Result, err error) {
	m.mu.Lock()
	stopping := m.stopping
	m.mu.Unlock()
	r.mu.Lock()
	if err != nil {
		res = module.Result{Exit: module.ExitFailed, Reason: module.ReasonEnvironmentError}
		r.err = err.Error()
	}
	if !res.Exit.Valid() {
		r.err = fmt.Sprintf("environment returned an invalid exit state %q", res.Exit)
		res = module.Result{Exit: module.ExitFailed, Reason: module.ReasonEnvironmentError}
	}
	if res.Exit == module.ExitCanceled && stopping && !r.killed {
		res.Reason = module.ReasonHostShutdown
	}
	if res.Reason == "" {
		res.Reason = defaultReason(res.Exit)
	}
	for _, t := range []*time.Timer{r.runningWrite, r.saveTimer} {
		if t != nil && t.Stop() {
			m.wg.Done() // never written: the final row says it all
		}
	}
	r.stdout.flush()
	r.stderr.flush()
	if res.Reason == module.ReasonOutputLimit {
		// The environment stops a stream at the cap, so the host may never
		// see a byte past it: a full stream is a cut one.
		for _, s := range []*stream{&r.stdout, &r.stderr} {
			s.truncated = s.truncated || (s.limit > 0 && s.size >= s.limit)
		}
	}
	now := time.Now().UTC()
	exit := string(res.Exit)
	final := r.base
	p := &final
	p.State, p.ExitState, p.Reason, p.Error, p.Environment = string(Idle), &exit, clean(string(res.Reason)), clean(r.err), envID
	p.Output, p.Stdout, p.Stderr = maps.Clone(r.output), r.stdout.text.String(), r.stderr.text.String()
	p.StdoutTruncated, p.StderrTruncated, p.OutputTruncated, p.FinishedAt = r.stdout.truncated, r.stderr.truncated, r.outputCut, &now
	if !r.startedAt.IsZero() {
		d := now.Sub(r.startedAt).Milliseconds()
		started := r.startedAt
		p.StartedAt, p.DurationMs = &started, &d
	}
	r.mu.Unlock()
	// The write must land even while the host shuts down.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r.saveMu.Lock()
	unsaved := r.unsaved
	r.unsaved = false
	write := func(p *store.Process) (bool, error) {
		if unsaved {
			return true, m.st.InsertProcess(ctx, p)
		}
		return m.st.FinishProcess(ctx, p, live)
	}
	if r.dropped {
		m.log.Warn("process not stored: its row could not be written", "pid", r.pid)
	} else if ok, err := write(p); err != nil {
		// Never leave it looking alive: store the failure without the
		// result that could not be stored.
		m.log.Error("record process result", "pid", r.pid, "err", err)
		failed := string(module.ExitFailed)
		p.ExitState, p.Reason, p.Error = &failed, string(module.ReasonEnvironmentError), "the host could not store the result: "+clean(err.Error())
		p.Output, p.Stdout, p.Stderr = nil, "", ""
		if _, err := write(p); err != nil {
			m.log.Error("record process failure", "pid", r.pid, "err", err)
			if unsaved {
				r.mu.Lock()
				r.lost = err
				r.mu.Unlock()
			}
		}
	} else if !ok {
		m.log.Warn("process result arrived for a process no longer live", "pid", r.pid)
	}
	r.saveMu.Unlock()
	m.mu.Lock()
	delete(m.runs, r.pid)
	m.mu.Unlock()
	r.end(p)
}

func defaultReason(e module.ExitState) module.Reason {
	switch e {
	case module.ExitSuccess:
		return module.ReasonCompleted
	case module.ExitTimeout:
		return module.ReasonTimeout
	case module.ExitCanceled:
		return module.ReasonKilled
	}
	return module.ReasonException
}

// Kill stops a queued or running process. A queued one is finished before
// Kill returns (idle, canceled); a running one is left terminating.
func (m *Manager) Kill(ctx context.Context, pid int64) (*Process, error) {
	m.mu.Lock()
	r := m.runs[pid]
	m.mu.Unlock()
	if r == nil {
		p, err := m.get(ctx, pid)
		if err != nil {
			return nil, err
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
		// From queued too: a short-lived running state may not be written yet.
		p := &store.Process{PID: pid, State: string(Terminating)}
		if _, err := m.st.TransitionProcess(ctx, p, []string{string(Queued), string(Running), string(Suspended)}, "state"); err != nil {
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

// Wait blocks until the process is idle, the timeout passes or ctx ends,
// then returns it.
func (m *Manager) Wait(ctx context.Context, pid int64, timeout time.Duration) (*Process, error) {
	m.mu.Lock()
	r := m.runs[pid]
	m.mu.Unlock()
	if r != nil && timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-r.done:
			return r.result()
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return m.Get(ctx, pid)
}

// Get returns a process; while it runs, with what it has produced so far.
func (m *Manager) Get(ctx context.Context, pid int64) (*Process, error) {
	p, err := m.get(ctx, pid)
	if err != nil {
		return nil, err
	}
	return m.view(p), nil
}

func (m *Manager) get(ctx context.Context, pid int64) (*store.Process, error) {
	p, err := m.st.GetProcess(ctx, pid)
	if errors.Is(err, store.ErrNotFound) {
		if r := m.lookup(pid); r != nil {
			// Running, its row not written yet.
			base := r.base
			return &base, nil
		}
		// Or it ended between the two reads, its row now written.
		if p, err = m.st.GetProcess(ctx, pid); errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("%w: %d", ErrNotFound, pid)
		}
	}
	return p, err
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

// List returns processes newest first and whether more follow.
func (m *Manager) List(ctx context.Context, in ListInput) ([]ProcessSummary, bool, error) {
	ps, err := m.st.ListProcesses(ctx, store.ProcessFilter{
		State: in.State, ExitState: in.ExitState, Ref: in.Ref, BeforePID: in.BeforePID, Limit: int64(in.Limit) + 1,
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

// Delete removes an idle process.
func (m *Manager) Delete(ctx context.Context, pid int64) error {
	m.mu.Lock()
	_, busy := m.runs[pid]
	m.mu.Unlock()
	if busy {
		return conflict("process %d is not idle", pid)
	}
	ok, err := m.st.DeleteProcess(ctx, pid, []string{string(Idle)})
	if err != nil {
		return err
	}
	if !ok {
		p, err := m.get(ctx, pid)
		if err != nil {
			return err
		}
		return conflict("process %d is %s, not idle", pid, p.State)
	}
	return nil
}

// Shutdown refuses new executions, kills the running ones (recorded as
// canceled, reason host_shutdown) and waits for their results to be stored.
func (m *Manager) Shutdown(ctx context.Context) error {
	m.mu.Lock()
	m.stopping = true
	m.mu.Unlock()
	m.cancel()
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("processes still stopping: %w", ctx.Err())
	}
}
