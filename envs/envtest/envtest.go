// Package envtest holds what environment tests share: a recording
// implementation of module.Bindings and the conformance suite every
// environment must pass.
package envtest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"sync"

	"github.com/cyrnel/cyrnel/envs/module"
)

// Recorder is a real, in-memory implementation of module.Bindings: it keeps
// what an environment reports, per eid, and serves tools from a map of Go
// functions.
type Recorder struct {
	mu      sync.Mutex
	runs    map[int64]*Run
	Tools   map[string]func(params map[string]any) (any, error) // "service.tool"
	changed chan struct{}
}

// Run is what was reported for one eid.
type Run struct {
	States []module.ExecState
	Errors []string
	Stdout []byte
	Stderr []byte
	Output map[string]any
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{runs: map[int64]*Run{}, Tools: map[string]func(map[string]any) (any, error){}, changed: make(chan struct{})}
}

func (r *Recorder) run(eid int64) *Run {
	x := r.runs[eid]
	if x == nil {
		x = &Run{Output: map[string]any{}}
		r.runs[eid] = x
	}
	return x
}

func (r *Recorder) update(eid int64, f func(*Run)) {
	r.mu.Lock()
	f(r.run(eid))
	close(r.changed)
	r.changed = make(chan struct{})
	r.mu.Unlock()
}

// Get returns a copy of what was reported for eid.
func (r *Recorder) Get(eid int64) Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	x := r.run(eid)
	return Run{
		States: append([]module.ExecState(nil), x.States...),
		Errors: append([]string(nil), x.Errors...),
		Stdout: append([]byte(nil), x.Stdout...),
		Stderr: append([]byte(nil), x.Stderr...),
		Output: maps.Clone(x.Output),
	}
}

// WaitFor blocks until cond holds for eid's record or ctx ends.
func (r *Recorder) WaitFor(ctx context.Context, eid int64, cond func(Run) bool) error {
	for {
		r.mu.Lock()
		ch := r.changed
		r.mu.Unlock()
		if cond(r.Get(eid)) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("eid %d: condition not met: %w", eid, ctx.Err())
		}
	}
}

func (r *Recorder) InvokeTool(_ context.Context, in module.InvokeInput) (any, error) {
	r.mu.Lock()
	f := r.Tools[in.ServiceID+"."+in.ToolID]
	r.mu.Unlock()
	if f == nil {
		return nil, fmt.Errorf("tool %s.%s not found", in.ServiceID, in.ToolID)
	}
	return f(in.Parameters)
}

func (r *Recorder) ListTools(context.Context) ([]module.Tool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []module.Tool
	for k := range r.Tools {
		var s, t string
		for i := range k {
			if k[i] == '.' {
				s, t = k[:i], k[i+1:]
				break
			}
		}
		out = append(out, module.Tool{ServiceID: s, ToolID: t, Name: t, Description: "test tool " + k,
			InputSchema: []byte(`{"type":"object","properties":{"x":{"type":"integer"}}}`)})
	}
	return out, nil
}

func (r *Recorder) SetState(eid int64, s module.ExecState) {
	r.update(eid, func(x *Run) { x.States = append(x.States, s) })
}
func (r *Recorder) SetError(eid int64, msg string) {
	r.update(eid, func(x *Run) { x.Errors = append(x.Errors, msg) })
}
func (r *Recorder) EmitStdout(eid int64, p []byte) {
	r.update(eid, func(x *Run) { x.Stdout = append(x.Stdout, p...) })
}
func (r *Recorder) EmitStderr(eid int64, p []byte) {
	r.update(eid, func(x *Run) { x.Stderr = append(x.Stderr, p...) })
}
func (r *Recorder) EmitOutput(eid int64, patch map[string]json.RawMessage) {
	r.update(eid, func(x *Run) {
		for k, raw := range patch {
			var v any
			if err := json.Unmarshal(raw, &v); err != nil {
				v = err // shown in a failing comparison
			}
			x.Output[k] = v
		}
	})
}

// ForkBurn is a Python program that forks four workers which each burn
// 0.6 s of their own CPU time, then prints "done" once all are done: no
// single process comes near a one-second CPU limit, the tree uses 2.4 s.
const ForkBurn = `
import os, time
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        while time.process_time() < 0.6:
            pass
        os._exit(0)
    kids.append(pid)
for k in kids:
    os.waitpid(k, 0)
print("done", flush=True)
`
