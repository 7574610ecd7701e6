package process

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/store"
)

// run is the live state of one execution, kept in memory while it lasts and
// written to the database when it ends.
type run struct {
	pid    int64
	base   store.Process // the row as launched; the final row is built on it
	done   chan struct{}
	cancel context.CancelFunc // kills the execution

	mu         sync.Mutex
	state      State
	startedAt  time.Time
	stdout     stream
	stderr     stream
	output     map[string]any
	keySizes   map[string]int64 // encoded size of each top-level key and value
	outputSize int64            // their sum: the size of the merged object
	outputCap  int64
	outputCut  bool
	err        string
	killed     bool
	final      *Process
	subs       map[chan Event]struct{}
	// runningWrite writes the running state if the execution lasts.
	runningWrite *time.Timer
	// ended: Execute has returned; the environment's reports are late.
	ended bool
	// suspends counts the tool calls waiting on approvals (suspend.go).
	suspends int
	waiting  []*Event   // approval events of the calls waiting, for replays
	stateMu  sync.Mutex // orders the suspended/running writes

	// saveMu orders the writes of a run whose row is not stored yet
	// (unsaved): whichever comes first inserts it.
	saveMu    sync.Mutex
	unsaved   bool
	dropped   bool        // its row could not be written when its pid was due: never stored
	saveTimer *time.Timer // inserts the row if the execution lasts
	lost      error       // under mu: why its final row, the first, could not be written
}

func newRun(p *store.Process, limit int64) *run {
	return &run{
		pid: p.PID, base: *p, done: make(chan struct{}), state: Queued,
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
	v.State = r.state
	v.Output = maps.Clone(r.output)
	v.Stdout, v.Stderr = r.stdout.text.String(), r.stderr.text.String()
	v.StdoutTruncated, v.StderrTruncated, v.OutputTruncated = r.stdout.truncated, r.stderr.truncated, r.outputCut
	if !r.startedAt.IsZero() {
		t := r.startedAt
		v.StartedAt = &t
	}
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

// result is how an ended run ended: its final row, stored and held so
// nobody need read it back, or why it could not be stored (then its pid
// could never be read back).
func (r *run) result() (*Process, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.lost != nil {
		return nil, fmt.Errorf("%w: %w", errNotStored, r.lost)
	}
	return r.final, nil
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
	r.startedAt = time.Now().UTC()
	started := r.startedAt
	r.publishLocked(Event{Type: EventState, State: Running})
	// Written only if it is still running a little later: readers overlay
	// the live state, restart recovery treats queued and running alike, and
	// the final row carries startedAt, so a short execution needs no write
	// of its own (on two cores it would hold SQLite's write lock while the
	// final write waits). The compare-and-set cannot land on a final state.
	m.wg.Add(1)
	r.runningWrite = time.AfterFunc(m.liveWriteDelay, func() {
		defer m.wg.Done()
		if inserted, err := m.save(context.Background(), r, false); err != nil || inserted {
			if err != nil {
				m.log.Error("record process", "pid", eid, "err", err)
			}
			return // stored with its live state: running
		}
		p := &store.Process{PID: eid, State: string(Running), StartedAt: &started}
		if _, err := m.st.TransitionProcess(context.Background(), p, []string{string(Queued)}, "state", "started_at"); err != nil {
			m.log.Error("record running state", "pid", eid, "err", err)
		}
	})
	r.mu.Unlock()
}

// liveWriteDelay is how long an execution runs before its live state (its
// row, or its running state) is written to the database.
const liveWriteDelay = 50 * time.Millisecond

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
// value would grow it past the cap is dropped and the output flagged.
func (m *Manager) EmitOutput(eid int64, patch map[string]any) {
	r := m.lookup(eid)
	if r == nil {
		return
	}
	sizes := make(map[string]int64, len(patch))
	for k, v := range patch {
		b, err := json.Marshal(v)
		if err != nil {
			continue
		}
		sizes[k] = int64(len(k) + len(b) + 4) // quotes, colon, comma
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
				m.log.Warn("structured output over its cap; keys dropped", "pid", eid, "key", k, "bytes", size)
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
		r.publishLocked(Event{Type: EventOutput, Output: applied})
	}
}
