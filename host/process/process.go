// Package process runs the host side of cyrnel processes: stored code plus
// its latest execution, moved through idle → queued → running →
// (terminating) → idle by compare-and-set writes, so a late event can never
// overwrite a final state.
package process

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/lifecycle"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/workspace"

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
	// ErrFull: the database had no room for a write (its disk is full);
	// nothing of that write was stored.
	ErrFull = store.ErrFull
)

// conflictError is an ErrConflict with its own message.
type conflictError struct{ msg string }

func (e *conflictError) Error() string { return e.msg }
func (e *conflictError) Unwrap() error { return ErrConflict }

// isNotFound: an error that says what it names does not exist.
func isNotFound(err error) bool {
	var nf interface{ NotFound() bool }
	return errors.As(err, &nf) && nf.NotFound()
}

func conflict(format string, args ...any) error {
	return &conflictError{fmt.Sprintf(format, args...)}
}

// Executor runs executions: the module registry.
type Executor interface {
	Execute(ctx context.Context, in module.ExecutionInput) (envID string, res module.Result, err error)
	Kill(ctx context.Context, eid int64) error
}

// Store is what processes need of the database: every write goes through
// a store.Tx, in a batch (WriteProcesses) or alone (WriteProcess).
type Store interface {
	WriteProcesses(ctx context.Context, fn func(context.Context, *store.Tx) error) error
	WriteProcess(ctx context.Context, fn func(context.Context, *store.Tx) error) error
	GetProcess(ctx context.Context, pid int64) (*store.Process, error)
	ListProcesses(ctx context.Context, f store.ProcessFilter) ([]store.Process, error)
	ListProcessFiles(ctx context.Context, pid int64) ([]store.ProcessFile, error)
	// OpenProcessFile reads a file an execution left, a part at a time.
	OpenProcessFile(ctx context.Context, pid int64, path string) (*store.ProcessFile, io.Reader, error)
	// FreeReserve gives the room kept for a full disk back, so a delete
	// can proceed; Reclaim returns pruned rows' room and makes it again.
	Reclaim(ctx context.Context) error
	FreeReserve() bool
	// RetentionCut reads where the retention bounds cut, outside the
	// writer (store.Tx.PruneProcesses deletes up to it).
	RetentionCut(ctx context.Context, maxBytes int64, before time.Time) (store.RetentionCut, error)
	// Local is true on SQLite, false on PostgreSQL.
	Local() bool
}

// Sessions runs executions in sessions (host/session).
type Sessions interface {
	// Check says whether the session can take an execution; otherwise
	// its error has NotFound() true (no such session) or Reason() (ended).
	Check(ctx context.Context, session string) error
	Execute(ctx context.Context, session string, in module.ExecutionInput) (envID string, res module.Result, err error)
}

// Limits bound what one process may hold.
type Limits struct {
	OutputBytes int64 // per stream (stdout, stderr) and for the structured output
	// OutputFileBytes caps the files a one-shot execution leaves, together
	// (spooled to disk, stored and downloaded in parts, never held whole).
	OutputFileBytes  int64
	CodeBytes        int
	DefaultTimeoutMs int64
	MaxTimeoutMs     int64
	// Keep bounds the finished processes kept (Retention).
	Keep Retention
}

// DefaultLimits are the documented defaults.
func DefaultLimits() Limits {
	return Limits{OutputBytes: 1 << 20, OutputFileBytes: 256 << 20, CodeBytes: 256 << 10, DefaultTimeoutMs: module.DefaultTimeoutMs, MaxTimeoutMs: 24 * 3600 * 1000,
		Keep: DefaultRetention()}
}

// Manager owns the processes.
type Manager struct {
	log      *slog.Logger
	host     string // this host's id, recorded on the processes it runs
	st       Store
	exec     Executor
	sessions Sessions // nil: no process names a session
	limits   Limits
	w        *writer // every write to a process row goes through it
	relay    Relay   // nil: one host
	obs      Observer
	tracer   trace.Tracer // nil: not traced
	// approvals tells the follows of executions other hosts run what
	// their calls wait on (nil: they are not told).
	approvals Approvals
	spoolDir  string // where runs spool their files
	now       func() time.Time

	ctx    context.Context // cancelled at shutdown: kills every execution
	cancel context.CancelFunc
	// wg counts the executions from their admission (before their row is
	// queued) to their final row, so Stop waits for every row it
	// could otherwise leave queued.
	wg       sync.WaitGroup
	mu       sync.Mutex
	runs     map[int64]*run
	stopping bool

	beforeLaunch func() // tests: runs in Create between the insert and the launch
	afterPrune   func() // tests: runs after each round of the pruner's

	every   time.Duration  // how often progress is flushed
	flusher lifecycle.Loop // flushes progress, from Start to Stop
	pruner  lifecycle.Loop // applies the retention bounds, from Start to Stop
	started bool           // under mu: Start ran
}

// FlushInterval is how often what running executions produced is written
// to their rows: a host that dies loses at most this much of their output.
const FlushInterval = time.Second

// New returns a manager for the host with the given id, writing progress
// every flush (0: FlushInterval), with the parts in with; Start it before
// serving and Stop it to stop.
func New(log *slog.Logger, st Store, exec Executor, limits Limits, hostID string, flush time.Duration, with With) *Manager {
	ins := with.Instruments
	if flush <= 0 {
		flush = FlushInterval
	}
	if ins.Observer == nil {
		ins.Observer = noObserver{}
	}
	if with.Now == nil {
		with.Now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{log: log, host: hostID, st: st, exec: exec, limits: limits, w: newWriter(st, ins), obs: ins.Observer, tracer: ins.Tracer,
		ctx: ctx, cancel: cancel, runs: map[int64]*run{}, sessions: with.Sessions, relay: with.Relay, approvals: with.Approvals, every: flush,
		spoolDir: with.SpoolDir, now: with.Now}
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
	// Session: run in this session (its interpreter keeps state) instead
	// of a fresh interpreter.
	Session string
	// Files are placed in the workspace of the execution Create starts
	// (with Autorun): at most MaxInputFiles, MaxFileBytes together.
	Files []module.File
}

// Caps of a process's files: the inputs of one execution (MaxInputFiles,
// MaxFileBytes together: they travel in the request), and the number of
// outputs it leaves in its workspace (MaxInputFiles; their bytes,
// Limits.OutputFileBytes).
const (
	MaxInputFiles = 20
	MaxFileBytes  = 8 << 20
)

// checkFiles validates a process's input files.
func checkFiles(files []module.File, autorun bool) error {
	if len(files) == 0 {
		return nil
	}
	if !autorun {
		return &schema.FieldError{Field: "files", Message: "input files go to the execution that creating the process starts: they need autorun"}
	}
	if len(files) > MaxInputFiles {
		return &schema.FieldError{Field: "files", Message: fmt.Sprintf("%d files, more than the limit of %d", len(files), MaxInputFiles)}
	}
	total := 0
	seen := map[string]bool{}
	for i, f := range files {
		field := fmt.Sprintf("files[%d].path", i)
		if err := workspace.ValidPath(field, f.Path); err != nil {
			return err
		}
		if seen[f.Path] {
			return &schema.FieldError{Field: field, Message: "the same path twice"}
		}
		seen[f.Path] = true
		total += len(f.Content)
	}
	if total > MaxFileBytes {
		return &schema.FieldError{Field: "files", Message: fmt.Sprintf("%d bytes together, more than the limit of %d", total, MaxFileBytes)}
	}
	return nil
}

// Create stores a process and, with Autorun, starts it.
func (m *Manager) Create(ctx context.Context, in CreateInput) (*Process, error) {
	for field, v := range map[string]string{"code": in.Code, "ref": in.Ref} {
		if strings.ContainsRune(v, 0) {
			return nil, &schema.FieldError{Field: field, Message: "contains a NUL character"}
		}
	}
	if len(in.Code) > m.limits.CodeBytes {
		return nil, &schema.FieldError{Field: "code", Message: fmt.Sprintf("code is %d bytes, more than the limit of %d", len(in.Code), m.limits.CodeBytes)}
	}
	if in.TimeoutMs == 0 {
		in.TimeoutMs = m.limits.DefaultTimeoutMs
	}
	if in.TimeoutMs < 1 || in.TimeoutMs > m.limits.MaxTimeoutMs {
		return nil, &schema.FieldError{Field: "timeoutMs", Message: fmt.Sprintf("must be between 1 and %d", m.limits.MaxTimeoutMs)}
	}
	if err := checkFiles(in.Files, in.Autorun); err != nil {
		return nil, err
	}
	if in.Session != "" && len(in.Files) > 0 {
		return nil, &schema.FieldError{Field: "files", Message: "a session's files go through PUT /sessions/{id}/files/{path}"}
	}
	if in.Session != "" {
		if m.sessions == nil {
			return nil, &schema.FieldError{Field: "session", Message: "this host runs no sessions"}
		}
		if err := m.sessions.Check(ctx, in.Session); err != nil {
			var ended interface{ Reason() module.Reason }
			switch {
			case errors.As(err, &ended):
				return nil, &conflictError{err.Error()}
			case isNotFound(err):
				return nil, &schema.FieldError{Field: "session", Message: err.Error()}
			}
			return nil, err
		}
	}
	p := &store.Process{
		Ref: in.Ref, Code: in.Code, State: string(Idle), TimeoutMs: in.TimeoutMs,
		EnvConfig: in.EnvConfig, CreatedAt: m.now().UTC(), HostID: m.host, Session: in.Session,
		Owner: caller.KeyID(ctx),
	}
	if in.Autorun {
		// Inserted already queued: one write fewer on the hot path.
		p.State, p.Runs = string(Queued), 1
	}
	if !in.Autorun {
		if err := m.w.do(func(ctx context.Context, tx *store.Tx) error { return tx.InsertProcess(ctx, p) }); err != nil {
			return nil, err
		}
		return m.view(p), nil
	}
	if err := m.admit(); err != nil {
		return nil, err
	}
	span := m.startExecution(ctx, p)
	p.TraceID = traceID(span)
	if err := m.w.traced(withSpan(ctx, span), "db.process.insert", func(ctx context.Context, tx *store.Tx) error { return tx.InsertProcess(ctx, p) }); err != nil {
		m.wg.Done()
		endFailed(span, err)
		return nil, err
	}
	if m.beforeLaunch != nil {
		m.beforeLaunch()
	}
	r := m.launch(p, in.Files, span)
	if in.Wait > 0 {
		// Its own run: a short execution's final row, held, is the answer.
		v, err := m.await(ctx, r, in.Wait)
		if store.Unavailable(err) {
			// The wait ended while the database cannot be read: the row is
			// stored and live (its final write waits on the database), so
			// it is answered as it stands here. A 503 would tell the
			// client it was not created, and it would be run again.
			return r.current(), nil
		}
		return v, err
	}
	return m.view(p), nil
}

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
	m.mu.Unlock()
	if busy {
		return nil, conflict("process %d is still stopping", pid)
	}
	if err := m.admit(); err != nil {
		return nil, err
	}
	p.State, p.ExitState, p.Reason, p.Error = string(Queued), nil, "", ""
	p.Output, p.Stdout, p.Stderr, p.StdoutTruncated, p.StderrTruncated, p.OutputTruncated = nil, "", "", false, false, false
	p.StartedAt, p.FinishedAt, p.DurationMs, p.Environment = nil, nil, nil, ""
	p.Runs, p.HostID = p.Runs+1, m.host
	p.CPUMs, p.PeakMemoryBytes, p.Displays = nil, nil, nil
	span := m.startExecution(ctx, p)
	p.TraceID = traceID(span)
	var ok bool
	err = m.w.traced(withSpan(ctx, span), "db.process.queue", func(ctx context.Context, tx *store.Tx) (err error) {
		ok, err = tx.TransitionProcess(ctx, p, []string{string(Idle)}, store.ProcState, store.ProcExitState, store.ProcReason, store.ProcError,
			store.ProcOutput, store.ProcStdout, store.ProcStderr, store.ProcStdoutTruncated, store.ProcStderrTruncated, store.ProcOutputTruncated,
			store.ProcStartedAt, store.ProcFinishedAt, store.ProcDurationMs, store.ProcCPUMs, store.ProcPeakMemoryBytes, store.ProcEnvironment,
			store.ProcRuns, store.ProcHostID, store.ProcDisplays, store.ProcTraceID)
		return err
	})
	if err == nil && !ok {
		err = conflict("process %d changed state", pid)
	}
	if err != nil {
		m.wg.Done()
		endFailed(span, err)
		return nil, err
	}
	m.launch(p, nil, span)
	return m.view(p), nil
}

// admit takes a place among the executions for one about to be queued, or
// refuses it once the host is stopping. The place is taken under the lock
// that sets stopping, so Stop's wait covers every execution admitted
// (no Add after its Wait); launch gives it back when the final row is
// written, or the caller does if the row was never queued.
func (m *Manager) admit() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping {
		return conflict("the host is shutting down")
	}
	m.wg.Add(1)
	return nil
}

// launch starts the execution of a process stored as queued, which admit
// let in, traced in span (nil: not traced).
func (m *Manager) launch(p *store.Process, files []module.File, span trace.Span) *run {
	r := newRun(p, m.limits.OutputBytes, m.spoolDir, m.now())
	r.span = span
	m.traceQueued(r)
	// Its own context: a kill cancels it, so a kill that arrives before the
	// environment has even seen the execution is not lost.
	ctx, cancel := context.WithCancel(m.ctx)
	r.cancel = cancel
	m.mu.Lock()
	if m.stopping {
		// Stop began after it was admitted: end it as Stop ends the rest
		// (Stop waits for this write).
		m.mu.Unlock()
		defer m.wg.Done()
		cancel()
		m.finish(r, "", module.Result{Exit: module.ExitCanceled}, nil)
		return r
	}
	m.runs[p.PID] = r
	m.mu.Unlock()
	ctx = executionContext(ctx, p.PID, span)
	go func() {
		defer m.wg.Done()
		defer cancel()
		in := module.ExecutionInput{
			EID: p.PID, Code: p.Code, EnvConfig: p.EnvConfig,
			Options: module.Options{TimeoutMs: p.TimeoutMs, OutputLimitBytes: m.limits.OutputBytes}, Files: files,
		}
		var envID string
		var res module.Result
		var err error
		if p.Session != "" && m.sessions != nil {
			envID, res, err = m.sessions.Execute(ctx, p.Session, in)
		} else {
			envID, res, err = m.exec.Execute(ctx, in)
		}
		m.finish(r, envID, res, err)
	}()
	return r
}

// finish writes the final row of an ended execution, then releases its
// waiters and followers. While the database cannot answer the write is
// tried again (the result is kept through an outage); a row that cannot
// take the result (a full disk) is finished as failed without it, so it
// never stays looking alive; so is one whose files met a full disk in the
// spool, which shares the data directory's disk.
func (m *Manager) finish(r *run, envID string, res module.Result, err error) {
	m.mu.Lock()
	stopping := m.stopping
	m.mu.Unlock()
	p := r.result(envID, res, err, stopping, m.now().UTC())
	sctx := r.logContext()
	write := func(p *store.Process) error {
		// An earlier run's files are replaced; a first run without files
		// costs no statement.
		files := len(r.files) > 0 || p.Runs > 1
		return m.w.tracedDurable(sctx, "db.process.finish", func(ctx context.Context, tx *store.Tx) error {
			ok, err := tx.FinishProcess(ctx, p)
			if err == nil && !ok {
				m.log.WarnContext(sctx, "process result arrived for a process no longer live", "pid", p.PID)
			}
			if err == nil && ok && files {
				err = tx.ReplaceProcessFiles(ctx, p.PID, r.files, func(i int) io.Reader { return r.spool.reader(i, r.files[i].Size) })
			}
			return err
		}, files)
	}
	r.mu.Lock()
	werr := r.spoolFull
	r.mu.Unlock()
	if werr == nil {
		werr = write(p)
	}
	if err := werr; err != nil {
		m.log.ErrorContext(sctx, "record process result", "pid", r.pid, "err", err)
		failed := string(module.ExitFailed)
		p.ExitState, p.Reason, p.Error = &failed, string(module.ReasonEnvironmentError), "the host could not store the result: "+clean(err.Error())
		p.Output, p.Stdout, p.Stderr, p.Displays = nil, "", "", nil
		r.files = nil
		err := write(p)
		if errors.Is(err, store.ErrFull) && m.st.FreeReserve() {
			// Even the failure found no room: the room held back for
			// deletes lets the row end, so it never stays looking alive.
			err = write(p)
		}
		if err != nil {
			m.log.ErrorContext(sctx, "record process failure", "pid", r.pid, "err", err)
		}
	}
	// Stored (or given up): the spool goes before any waiter is released.
	r.spool.close()
	m.mu.Lock()
	delete(m.runs, r.pid)
	m.mu.Unlock()
	m.ended(r, p)
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

// Delete removes an idle process.
func (m *Manager) Delete(ctx context.Context, pid int64) error {
	if _, scoped := caller.Scope(ctx); scoped {
		// Whether it exists for this key comes first: a busy process of
		// another key is as missing as any.
		if _, err := m.get(ctx, pid); err != nil {
			return err
		}
	}
	if m.lookup(pid) != nil {
		return conflict("process %d is not idle", pid)
	}
	var ok bool
	del := func(ctx context.Context, tx *store.Tx) (err error) {
		ok, err = tx.DeleteProcess(ctx, pid, []string{string(Idle)})
		return err
	}
	err := m.w.do(del)
	if errors.Is(err, store.ErrFull) && m.st.FreeReserve() {
		// The disk is full: the room held back for deletes lets this one
		// log what it frees.
		err = m.w.do(del)
	}
	if err != nil {
		return err
	}
	m.reclaim(m.ctx)
	if !ok {
		p, err := m.get(ctx, pid)
		if err != nil {
			return err
		}
		return conflict("process %d is %s, not idle", pid, p.State)
	}
	return nil
}
