package typescript

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
)

// recorder is the test's implementation of module.Bindings: it records what
// executions report and answers tool calls for real. Tools of service "t":
// echo returns its call, fail returns an error, gather blocks until
// gatherN calls are in flight at once (so it only completes when calls run
// concurrently).
type recorder struct {
	mu     sync.Mutex
	states map[int64][]module.ExecState
	errs   map[int64]string
	stdout map[int64]*strings.Builder
	stderr map[int64]*strings.Builder
	output map[int64]map[string]any
	calls  []module.InvokeInput

	// lines receives every stdout chunk, for tests that wait on a program.
	lines   chan string
	stateCh chan string

	gatherN       int
	gatherMu      sync.Mutex
	gatherWaiting int
	gatherRelease chan struct{}
}

func newRecorder() *recorder {
	return &recorder{
		states:        map[int64][]module.ExecState{},
		errs:          map[int64]string{},
		stdout:        map[int64]*strings.Builder{},
		stderr:        map[int64]*strings.Builder{},
		output:        map[int64]map[string]any{},
		lines:         make(chan string, 1024),
		stateCh:       make(chan string, 1024),
		gatherRelease: make(chan struct{}),
	}
}

var testTools = []module.Tool{
	{ServiceID: "t", ToolID: "echo", Name: "Echo", Description: "Returns its call."},
	{ServiceID: "t", ToolID: "fail", Name: "Fail", Description: "Always fails."},
	{ServiceID: "t", ToolID: "gather", Name: "Gather", Description: "Waits for concurrent calls."},
}

func (r *recorder) InvokeTool(ctx context.Context, in module.InvokeInput) (any, error) {
	r.mu.Lock()
	r.calls = append(r.calls, in)
	r.mu.Unlock()
	switch in.ToolID {
	case "echo":
		return map[string]any{"service": in.ServiceID, "tool": in.ToolID, "params": in.Parameters}, nil
	case "fail":
		return nil, &module.ToolError{Code: module.ToolUpstreamError, Status: 502, Details: map[string]any{"why": "no"}, Err: errors.New("upstream said no")}
	case "gather":
		r.gatherMu.Lock()
		r.gatherWaiting++
		if r.gatherWaiting == r.gatherN {
			close(r.gatherRelease)
		}
		r.gatherMu.Unlock()
		select {
		case <-r.gatherRelease:
			return in.Parameters["i"], nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return nil, fmt.Errorf("tool %s.%s not found", in.ServiceID, in.ToolID)
}

func (r *recorder) ListTools(context.Context) ([]module.Tool, error) { return testTools, nil }

func (r *recorder) SetState(eid int64, s module.ExecState) {
	r.mu.Lock()
	r.states[eid] = append(r.states[eid], s)
	r.mu.Unlock()
	select {
	case r.stateCh <- fmt.Sprintf("%d:%s", eid, s):
	default:
	}
}

func (r *recorder) SetError(eid int64, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs[eid] = msg
}

func (r *recorder) EmitStdout(eid int64, p []byte) {
	r.mu.Lock()
	buf(r.stdout, eid).Write(p)
	r.mu.Unlock()
	select {
	case r.lines <- string(p):
	default:
	}
}

func (r *recorder) EmitStderr(eid int64, p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	buf(r.stderr, eid).Write(p)
}

// EmitOutput merges as the host does.
func (r *recorder) EmitOutput(eid int64, patch map[string]json.RawMessage) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.output[eid] == nil {
		r.output[eid] = map[string]any{}
	}
	for k, raw := range patch {
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			v = err // shown in a failing comparison
		}
		r.output[eid][k] = v
	}
}

func buf(m map[int64]*strings.Builder, eid int64) *strings.Builder {
	if m[eid] == nil {
		m[eid] = &strings.Builder{}
	}
	return m[eid]
}

func (r *recorder) Stdout(eid int64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return buf(r.stdout, eid).String()
}

func (r *recorder) Stderr(eid int64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return buf(r.stderr, eid).String()
}

func (r *recorder) Error(eid int64) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errs[eid]
}

// waitFor blocks until a stdout chunk contains s.
func (r *recorder) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case line := <-r.lines:
			if strings.Contains(line, s) {
				return
			}
		case <-deadline:
			t.Fatalf("no stdout containing %q", s)
		}
	}
}

// waitState blocks until eid reports state.
func (r *recorder) waitState(t *testing.T, eid int64, state module.ExecState) {
	t.Helper()
	want := fmt.Sprintf("%d:%s", eid, state)
	deadline := time.After(10 * time.Second)
	for {
		select {
		case s := <-r.stateCh:
			if s == want {
				return
			}
		case <-deadline:
			t.Fatalf("eid %d never reported %s", eid, state)
		}
	}
}

// newEnv sets up an environment over a fresh recorder.
func newEnv(t testing.TB, config map[string]any) (*Environment, *recorder) {
	t.Helper()
	rec := newRecorder()
	env := New(nil)
	if err := env.Setup(context.Background(), module.SetupContext{Config: config, Bindings: rec}); err != nil {
		t.Fatalf("setup: %v", err)
	}
	t.Cleanup(func() {
		if err := env.Teardown(context.Background()); err != nil {
			t.Errorf("teardown: %v", err)
		}
	})
	return env, rec
}

func execute(t *testing.T, env *Environment, eid int64, code string, timeoutMs int64) module.Result {
	t.Helper()
	res, err := env.Execute(context.Background(), module.ExecutionInput{EID: eid, Code: code, Options: module.Options{TimeoutMs: timeoutMs}})
	if err != nil {
		t.Fatalf("execute %d: %v", eid, err)
	}
	return res
}
