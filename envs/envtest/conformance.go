package envtest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
)

// Programs are one environment's versions of the conformance programs, by
// name. Each must behave as its comment says.
type Programs struct {
	Print      string // writes "hi\n" to stdout and "warn\n" to stderr
	Output     string // cyrnel.output({a: 1, b: 1}) then ({b: 2, c: "x"})
	Throw      string // throws/raises an error whose message is "boom"
	Syntax     string // does not parse
	Loop       string // loops forever without yielding
	Block      string // prints "started\n", then waits forever
	Await      string // awaits at top level, then prints "awaited\n"
	SetGlobal  string // sets a global or module attribute named leak
	ReadGlobal string // prints "clean\n" when leak is not set
	Tool       string // calls tool echo.twice with {x: 21} and outputs {r: <result>}
	ToolError  string // calls tool echo.fail, catches the error, prints its message
	Flood      string // prints forever
	Unicode    string // prints "héllo €\n"
}

// Factory makes a set-up environment bound to b; the suite tears it down.
type Factory func(t *testing.T, b module.Bindings) module.Environment

// Conformance is the suite every environment passes.
func Conformance(t *testing.T, factory Factory, p Programs) {
	rec := NewRecorder()
	rec.Tools["echo.twice"] = func(params map[string]any) (any, error) {
		x, _ := params["x"].(float64)
		return map[string]any{"value": x * 2}, nil
	}
	rec.Tools["echo.fail"] = func(map[string]any) (any, error) { return nil, errors.New("upstream said no") }
	env := factory(t, rec)
	t.Cleanup(func() { env.Teardown(context.Background()) })
	s := &suite{env: env, rec: rec, p: p}
	// Each case is a method of suite, named in this table.
	for _, c := range []struct {
		name string
		run  func(*suite, *testing.T)
	}{
		{"print", (*suite).print},
		{"output is a merge patch", (*suite).output},
		{"throw", (*suite).throw},
		{"syntax error", (*suite).syntax},
		{"timeout is timeout", (*suite).timeout},
		{"kill is canceled", (*suite).kill},
		{"top-level await", (*suite).await},
		{"nothing leaks between executions", (*suite).noLeaks},
		{"tools", (*suite).tools},
		{"output limit", (*suite).outputLimit},
		{"unicode", (*suite).unicode},
		{"concurrent executions", (*suite).concurrent},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(s, t) })
	}
}

// suite is one environment under test and what its bindings recorded.
type suite struct {
	env module.Environment
	rec *Recorder
	p   Programs
	mu  sync.Mutex
	eid int64
}

func (s *suite) next() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eid++
	return s.eid
}

func (s *suite) exec(t *testing.T, code string, timeoutMs int64) (int64, module.Result, Run) {
	t.Helper()
	id := s.next()
	res, err := s.env.Execute(context.Background(), module.ExecutionInput{
		EID: id, Code: code, Options: module.Options{TimeoutMs: timeoutMs, OutputLimitBytes: 64 << 10},
	})
	if err != nil {
		t.Fatalf("execute: %v", err)
	}
	return id, res, s.rec.Get(id)
}

func expect(t *testing.T, res module.Result, exit module.ExitState, reason module.Reason, r Run) {
	t.Helper()
	if res.Exit != exit || (reason != "" && res.Reason != reason) {
		t.Fatalf("got %s/%s, want %s/%s; errors %q stdout %q stderr %q", res.Exit, res.Reason, exit, reason, r.Errors, r.Stdout, r.Stderr)
	}
}

func (s *suite) print(t *testing.T) {
	_, res, r := s.exec(t, s.p.Print, 10000)
	expect(t, res, module.ExitSuccess, module.ReasonCompleted, r)
	if string(r.Stdout) != "hi\n" || string(r.Stderr) != "warn\n" {
		t.Fatalf("stdout %q stderr %q", r.Stdout, r.Stderr)
	}
	if len(r.States) == 0 || r.States[len(r.States)-1] != module.StateRunning {
		t.Fatalf("states %v: running not reported", r.States)
	}
}

func (s *suite) output(t *testing.T) {
	_, res, r := s.exec(t, s.p.Output, 10000)
	expect(t, res, module.ExitSuccess, "", r)
	if r.Output["a"] != 1.0 || r.Output["b"] != 2.0 || r.Output["c"] != "x" {
		t.Fatalf("output %v", r.Output)
	}
}

func (s *suite) throw(t *testing.T) {
	_, res, r := s.exec(t, s.p.Throw, 10000)
	expect(t, res, module.ExitFailed, module.ReasonException, r)
	if len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "boom") || len(r.Stderr) == 0 {
		t.Fatalf("errors %q stderr %q", r.Errors, r.Stderr)
	}
}

func (s *suite) syntax(t *testing.T) {
	_, res, r := s.exec(t, s.p.Syntax, 10000)
	expect(t, res, module.ExitFailed, "", r)
	if len(r.Errors) != 1 || !strings.Contains(strings.ToLower(r.Errors[0]), "syntax") {
		t.Fatalf("errors %q", r.Errors)
	}
}

func (s *suite) timeout(t *testing.T) {
	_, res, r := s.exec(t, s.p.Loop, 200)
	expect(t, res, module.ExitTimeout, module.ReasonTimeout, r)
}

func (s *suite) kill(t *testing.T) {
	id := s.next()
	done := make(chan module.Result, 1)
	go func() {
		res, err := s.env.Execute(context.Background(), module.ExecutionInput{EID: id, Code: s.p.Block, Options: module.Options{TimeoutMs: 30000}})
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.rec.WaitFor(ctx, id, func(r Run) bool { return string(r.Stdout) == "started\n" }); err != nil {
		t.Fatal(err)
	}
	if err := s.env.Kill(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		expect(t, res, module.ExitCanceled, module.ReasonKilled, s.rec.Get(id))
	case <-ctx.Done():
		t.Fatal("execution did not end after Kill")
	}
	if err := s.env.Kill(context.Background(), 1<<60); err != nil {
		t.Fatalf("kill of an unknown eid: %v", err)
	}
}

// printsOnly runs code, which must succeed and print exactly want.
func (s *suite) printsOnly(t *testing.T, code, want string) {
	t.Helper()
	_, res, r := s.exec(t, code, 10000)
	expect(t, res, module.ExitSuccess, "", r)
	if string(r.Stdout) != want {
		t.Fatalf("stdout %q, want %q", r.Stdout, want)
	}
}

func (s *suite) await(t *testing.T) { s.printsOnly(t, s.p.Await, "awaited\n") }

func (s *suite) noLeaks(t *testing.T) {
	_, res, r := s.exec(t, s.p.SetGlobal, 10000)
	expect(t, res, module.ExitSuccess, "", r)
	s.printsOnly(t, s.p.ReadGlobal, "clean\n")
}

func (s *suite) tools(t *testing.T) {
	_, res, r := s.exec(t, s.p.Tool, 10000)
	expect(t, res, module.ExitSuccess, "", r)
	if got, _ := r.Output["r"].(map[string]any); got["value"] != 42.0 {
		t.Fatalf("output %v", r.Output)
	}
	_, res, r = s.exec(t, s.p.ToolError, 10000)
	expect(t, res, module.ExitSuccess, "", r)
	if !strings.Contains(string(r.Stdout), "upstream said no") {
		t.Fatalf("stdout %q", r.Stdout)
	}
}

func (s *suite) outputLimit(t *testing.T) {
	_, res, r := s.exec(t, s.p.Flood, 20000)
	expect(t, res, module.ExitFailed, module.ReasonOutputLimit, r)
	if len(r.Stdout) > 64<<10 {
		t.Fatalf("emitted %d bytes past a %d limit", len(r.Stdout), 64<<10)
	}
}

func (s *suite) unicode(t *testing.T) { s.printsOnly(t, s.p.Unicode, "héllo €\n") }

func (s *suite) concurrent(t *testing.T) {
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := s.next()
			res, err := s.env.Execute(context.Background(), module.ExecutionInput{EID: id, Code: s.p.Print, Options: module.Options{TimeoutMs: 20000}})
			if r := s.rec.Get(id); err != nil || res.Exit != module.ExitSuccess || string(r.Stdout) != "hi\n" {
				t.Errorf("eid %d: %v %+v stdout %q", id, err, res, r.Stdout)
			}
		}()
	}
	wg.Wait()
}
