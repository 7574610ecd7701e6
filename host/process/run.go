package process

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/store"
	"github.com/cyrnel/cyrnel/host/workspace"
)

// run is the live state of one execution, kept in memory while it lasts.
// Its row is written through the manager's writer: inserted before it
// starts, its progress at each flush, its final row when it ends.
type run struct {
	pid    int64
	base   store.Process // the row as launched; the final row is built on it
	done   chan struct{}
	cancel context.CancelFunc // kills the execution
	// span is the execution's (nil: tracing is off); phase, under mu, is
	// its queue span, then its run span.
	span     trace.Span
	phase    trace.Span
	queuedAt time.Time

	mu            sync.Mutex
	state         State
	startedAt     time.Time
	stdout        stream
	stderr        stream
	output        map[string]any
	keySizes      map[string]int64 // encoded size of each top-level key and value
	outputSize    int64            // their sum: the size of the merged object
	outputCap     int64
	outputCut     bool
	outputVersion int64 // counts the output's changes
	displays      []store.Display
	displaySize   int64
	files         []store.ProcessFile // left in the workspace (one-shot), written with the final row
	fileSize      int64
	spool         fileSpool // the files' content
	spoolFull     error     // a file found no room in the spool: the result cannot be kept whole
	err           string
	killed        bool
	ended         bool // Execute returned: the environment's reports are late
	final         *Process
	subs          map[chan Event]struct{}
	saved         saved // what the database holds of this run
	// suspends counts the tool calls waiting on approvals (suspend.go).
	suspends int
	waiting  []*Event   // approval events of the calls waiting, for replays
	stateMu  sync.Mutex // orders the suspended/running writes
}

// saved is how much of a run's live state its row holds: the running
// state, the lengths of the streams' stored text, and the version of the
// structured output (outputVersion counts its changes).
type saved struct {
	running        bool
	stdout, stderr int
	outputVersion  int64
	truncated      [3]bool // stdout, stderr, output
}

func newRun(p *store.Process, limit int64, spoolDir string, queuedAt time.Time) *run {
	return &run{
		pid: p.PID, base: *p, done: make(chan struct{}), state: Queued, queuedAt: queuedAt, spool: fileSpool{dir: spoolDir},
		stdout: stream{limit: limit}, stderr: stream{limit: limit},
		output: map[string]any{}, keySizes: map[string]int64{}, outputCap: limit, subs: map[chan Event]struct{}{},
	}
}

// overlay puts the live state on a stored view.
func (r *run) overlay(v *Process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.final != nil {
		return
	}
	r.overlayLocked(v)
}

// current is the run as it stands without reading the database: its final
// row once that is stored, else the row as launched with the live state on
// it.
func (r *run) current() *Process {
	base := r.base
	v := viewOf(&base)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.final != nil {
		return r.final
	}
	r.overlayLocked(v)
	return v
}

func (r *run) overlayLocked(v *Process) {
	v.State = r.state
	v.Output = maps.Clone(r.output)
	v.Stdout, v.Stderr = r.stdout.text.String(), r.stderr.text.String()
	v.StdoutTruncated, v.StderrTruncated, v.OutputTruncated = r.stdout.truncated, r.stderr.truncated, r.outputCut
	if !r.startedAt.IsZero() {
		t := r.startedAt
		v.StartedAt = &t
	}
}

// result ends the run's live state (later reports are ignored) and builds
// its final row, finished at now, from what the environment answered.
func (r *run) result(envID string, res module.Result, err error, stopping bool, now time.Time) *store.Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended = true
	var reasoned interface{ Reason() module.Reason }
	var ended interface{ Outcome() module.Result }
	switch {
	case errors.As(err, &ended):
		// An execution that ended its session: its own result, and why.
		res = ended.Outcome()
		r.err = err.Error()
	case errors.As(err, &reasoned):
		// An error that says how the execution ended (its session ended).
		res = module.Result{Exit: module.ExitFailed, Reason: reasoned.Reason()}
		r.err = err.Error()
	case err != nil:
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
	r.stdout.flush()
	r.stderr.flush()
	if res.Reason == module.ReasonOutputLimit {
		// The environment stops a stream at the cap, so the host may never
		// see a byte past it: a full stream is a cut one.
		for _, s := range []*stream{&r.stdout, &r.stderr} {
			s.truncated = s.truncated || (s.limit > 0 && s.size >= s.limit)
		}
	}
	exit := string(res.Exit)
	p := r.base
	p.State, p.ExitState, p.Reason, p.Error, p.Environment = string(Idle), &exit, clean(string(res.Reason)), clean(r.err), envID
	p.Output, p.Stdout, p.Stderr = maps.Clone(r.output), r.stdout.text.String(), r.stderr.text.String()
	p.StdoutTruncated, p.StderrTruncated, p.OutputTruncated, p.FinishedAt = r.stdout.truncated, r.stderr.truncated, r.outputCut, &now
	p.Displays = r.displays
	if !r.startedAt.IsZero() {
		d := now.Sub(r.startedAt).Milliseconds()
		started := r.startedAt
		p.StartedAt, p.DurationMs = &started, &d
	}
	if res.CPUMs > 0 {
		p.CPUMs = &res.CPUMs
	}
	if res.PeakMemoryBytes > 0 {
		p.PeakMemoryBytes = &res.PeakMemoryBytes
	}
	return &p
}

// end records the final view, tells followers and releases waiters.
func (r *run) end(p *store.Process) {
	r.mu.Lock()
	r.final = viewOf(p)
	r.publishLocked(Event{Type: EventExit, Process: r.final})
	for ch := range r.subs {
		close(ch)
	}
	r.subs = nil
	r.mu.Unlock()
	close(r.done)
}

func (m *Manager) lookup(eid int64) *run {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.runs[eid]
}

// SetState takes an environment's advisory state report: duplicates are
// ignored and only queued → running is a transition the host accepts.
func (m *Manager) SetState(eid int64, s module.ExecState) {
	r := m.lookup(eid)
	if r == nil {
		return
	}
	r.mu.Lock()
	if s != module.StateRunning || r.state != Queued || r.ended {
		r.mu.Unlock()
		return
	}
	r.state = Running
	r.startedAt = m.now().UTC()
	m.traceRunning(r)
	r.publishLocked(Event{Type: EventState, State: Running})
	r.mu.Unlock()
}

// SetError records why an execution failed.
func (m *Manager) SetError(eid int64, msg string) {
	if r := m.lookup(eid); r != nil {
		r.mu.Lock()
		if !r.ended {
			r.err = msg
		}
		r.mu.Unlock()
	}
}

// EmitStdout appends raw bytes to the process's stdout.
func (m *Manager) EmitStdout(eid int64, p []byte) { m.emit(eid, p, EventStdout) }

// EmitStderr appends raw bytes to the process's stderr.
func (m *Manager) EmitStderr(eid int64, p []byte) { m.emit(eid, p, EventStderr) }

func (m *Manager) emit(eid int64, p []byte, typ EventType) {
	r := m.lookup(eid)
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return
	}
	s := &r.stdout
	if typ == EventStderr {
		s = &r.stderr
	}
	if text := s.write(p); text != "" {
		r.publishLocked(Event{Type: typ, Text: text})
	}
}

// EmitOutput merges a patch into the structured output: later keys
// overwrite, new keys are added. The merged object is capped: a key whose
// value would grow it past the cap is dropped and the output flagged. The
// values stay the JSON the runtime wrote; their size is its length.
func (m *Manager) EmitOutput(eid int64, patch map[string]json.RawMessage) {
	r := m.lookup(eid)
	if r == nil {
		return
	}
	sizes := make(map[string]int64, len(patch))
	for k, v := range patch {
		sizes[k] = int64(len(k) + len(v) + 4) // quotes, colon, comma
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return
	}
	applied := map[string]any{}
	for k, size := range sizes {
		if r.outputSize-r.keySizes[k]+size > r.outputCap {
			if !r.outputCut {
				// Said where the client looks, not only in the log: once, on
				// stderr (and in error if stderr is already full).
				note := fmt.Sprintf("cyrnel: output key %q (%d bytes) dropped: the structured output is capped at %d bytes\n", k, size, r.outputCap)
				if text := r.stderr.add([]byte(note)); text != "" {
					r.publishLocked(Event{Type: EventStderr, Text: text})
				}
				if r.stderr.truncated && r.err == "" {
					r.err = strings.TrimSuffix(note, "\n")
				}
				m.log.WarnContext(r.logContext(), "structured output over its cap; keys dropped", "pid", eid, "key", k, "bytes", size)
			}
			r.outputCut = true
			continue
		}
		r.outputSize += size - r.keySizes[k]
		r.keySizes[k] = size
		r.output[k] = patch[k]
		applied[k] = patch[k]
	}
	if len(applied) > 0 {
		r.outputVersion++
		r.publishLocked(Event{Type: EventOutput, Output: applied})
	}
}

// Display is one rich display of an execution: a MIME bundle (text, or
// base64 for binary types) and whether the program showed it or it is the
// value of its final expression.
type Display struct {
	Index int
	Kind  string
	Data  map[string]string
}

// maxDisplays bounds how many displays one execution keeps; their bytes
// share the output cap.
const maxDisplays = 100

// EmitDisplay records a display. Past the cap (count, or the output cap in
// bytes) displays are dropped, the output flagged truncated and a line
// written to stderr, as for the structured output.
func (m *Manager) EmitDisplay(eid int64, d module.Display) {
	r := m.lookup(eid)
	if r == nil {
		return
	}
	size := int64(0)
	for k, v := range d.Data {
		size += int64(len(k) + len(v))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return
	}
	if len(r.displays) >= maxDisplays || r.displaySize+size > r.outputCap {
		if !r.outputCut {
			note := fmt.Sprintf("cyrnel: display dropped (%d bytes): an execution keeps at most %d displays and %d bytes of them\n", size, maxDisplays, r.outputCap)
			if text := r.stderr.add([]byte(note)); text != "" {
				r.publishLocked(Event{Type: EventStderr, Text: text})
			}
			m.log.WarnContext(r.logContext(), "displays over their cap; dropped", "pid", eid, "bytes", size)
		}
		r.outputCut = true
		return
	}
	r.displaySize += size
	r.displays = append(r.displays, store.Display{Kind: d.Kind, Data: d.Data})
	r.publishLocked(Event{Type: EventDisplay, Display: &Display{Index: len(r.displays) - 1, Kind: d.Kind, Data: d.Data}})
}

// EmitFile keeps a file a one-shot program left in its workspace, within
// the caps (MaxInputFiles files, Limits.OutputFileBytes together); past them
// the file is dropped, the output flagged truncated and stderr says so. A
// file comes in parts (appended: data continues the file sent last, of the
// same path), which are spooled to disk, not held in memory.
func (m *Manager) EmitFile(eid int64, path string, data []byte, appended bool) {
	r := m.lookup(eid)
	if r == nil || workspace.ValidPath("path", path) != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended {
		return
	}
	var last *store.ProcessFile
	if n := len(r.files); n > 0 {
		last = &r.files[n-1]
	}
	if appended {
		// The part of a file that was dropped, or of none, is dropped.
		if last == nil || last.Path != path {
			return
		}
	} else if slices.ContainsFunc(r.files, func(f store.ProcessFile) bool { return f.Path == path }) {
		return
	}
	if limit := m.limits.OutputFileBytes; (!appended && len(r.files) >= MaxInputFiles) || r.fileSize+int64(len(data)) > limit {
		r.dropFileLocked(path, int64(len(data)), appended, fmt.Sprintf("a process keeps at most %d files and %d bytes of them", MaxInputFiles, limit))
		return
	}
	if err := r.spool.write(data, !appended); err != nil {
		if !appended {
			r.spool.dropLast()
		}
		m.log.WarnContext(r.logContext(), "process file not kept", "pid", eid, "path", path, "err", err)
		r.dropFileLocked(path, int64(len(data)), appended, "the host could not spool it")
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			// The spool shares the data directory's disk: the result
			// would be stored without a file the program wrote, so it
			// ends as the full disk it met (finish).
			r.spoolFull = fmt.Errorf("%w: a file the program wrote found no room (%w)", store.ErrFull, err)
		}
		return
	}
	r.fileSize += int64(len(data))
	if appended {
		last.Size += int64(len(data))
		return
	}
	r.files = append(r.files, store.ProcessFile{PID: r.pid, Path: path, Size: int64(len(data)), ModifiedAt: m.now().UTC()})
}

// dropFileLocked drops the file being sent (size bytes more of it), whole,
// and says why on stderr.
func (r *run) dropFileLocked(path string, size int64, appended bool, why string) {
	if appended {
		last := r.files[len(r.files)-1]
		size += last.Size
		r.fileSize -= last.Size
		r.files = r.files[:len(r.files)-1]
		r.spool.dropLast()
	}
	note := fmt.Sprintf("cyrnel: output file %s (%d bytes so far) not kept: %s\n", path, size, why)
	if text := r.stderr.add([]byte(note)); text != "" {
		r.publishLocked(Event{Type: EventStderr, Text: text})
	}
	r.outputCut = true
}

// OutputFile is one file a process left in its workspace.
type OutputFile struct {
	Path       string
	Size       int64
	ModifiedAt time.Time
}

// Files lists the files the process's latest execution left.
func (m *Manager) Files(ctx context.Context, pid int64) ([]OutputFile, error) {
	if _, err := m.get(ctx, pid); err != nil {
		return nil, err
	}
	rows, err := m.st.ListProcessFiles(ctx, pid)
	if err != nil {
		return nil, err
	}
	out := make([]OutputFile, len(rows))
	for i, f := range rows {
		out[i] = OutputFile{Path: f.Path, Size: f.Size, ModifiedAt: f.ModifiedAt}
	}
	return out, nil
}

// ErrFileNotFound: the process has no such file.
var ErrFileNotFound = errors.New("file not found")

// File returns one file the process left: its size and a reader of its
// content, which reads it from the database a part at a time.
func (m *Manager) File(ctx context.Context, pid int64, path string) (int64, io.Reader, error) {
	if err := workspace.ValidPath("path", path); err != nil {
		return 0, nil, err
	}
	if _, err := m.get(ctx, pid); err != nil {
		return 0, nil, err
	}
	f, content, err := m.st.OpenProcessFile(ctx, pid, path)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, fmt.Errorf("%w: process %d has no file %s", ErrFileNotFound, pid, path)
	}
	if err != nil {
		return 0, nil, err
	}
	return f.Size, content, nil
}

// Displays returns a process's displays (a live one's so far).
func (m *Manager) Displays(ctx context.Context, pid int64) ([]Display, error) {
	var ds []store.Display
	r, err := m.live(ctx, pid)
	if err != nil {
		return nil, err
	}
	if r != nil {
		r.mu.Lock()
		if r.final == nil {
			ds = slices.Clone(r.displays)
			r.mu.Unlock()
			return displayViews(ds), nil
		}
		r.mu.Unlock()
	}
	p, err := m.get(ctx, pid)
	if err != nil {
		return nil, err
	}
	return displayViews(p.Displays), nil
}

func displayViews(ds []store.Display) []Display {
	out := make([]Display, len(ds))
	for i, d := range ds {
		out[i] = Display{Index: i, Kind: d.Kind, Data: d.Data}
	}
	return out
}

// progress is the write that brings the run's row up to its live state
// (the running state, the new stream text, the output), or nil if the row
// holds it all. ok records that the write landed.
func (r *run) progress() (apply func(context.Context, *store.Tx) error, ok func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := saved{
		running: r.saved.running || (r.state == Running && !r.startedAt.IsZero()),
		stdout:  r.stdout.text.Len(), stderr: r.stderr.text.Len(), outputVersion: r.outputVersion,
		truncated: [3]bool{r.stdout.truncated, r.stderr.truncated, r.outputCut},
	}
	if r.ended || now == r.saved {
		return nil, nil
	}
	startRunning := now.running && !r.saved.running
	started := r.startedAt
	pr := &store.Progress{
		PID: r.pid, Runs: r.base.Runs, Output: maps.Clone(r.output),
		Stdout: r.stdout.text.String()[r.saved.stdout:], Stderr: r.stderr.text.String()[r.saved.stderr:],
		StdoutTruncated: now.truncated[0], StderrTruncated: now.truncated[1], OutputTruncated: now.truncated[2],
	}
	var changed bool
	apply = func(ctx context.Context, tx *store.Tx) error {
		if startRunning {
			p := &store.Process{PID: r.pid, Runs: r.base.Runs, State: string(Running), StartedAt: &started}
			if _, err := tx.TransitionRun(ctx, p, []string{string(Queued)}, store.ProcState, store.ProcStartedAt); err != nil {
				return err
			}
		}
		var err error
		changed, err = tx.AppendProgress(ctx, pr)
		return err
	}
	return apply, func() {
		if !changed {
			return // its row has moved on: nothing is saved that was not
		}
		r.mu.Lock()
		r.saved = now
		r.mu.Unlock()
	}
}
