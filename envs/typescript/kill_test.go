package typescript

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
)

func TestInfiniteLoopTimesOut(t *testing.T) {
	t.Parallel()
	env, _ := newEnv(t, nil)
	for _, c := range []struct{ name, code string }{
		{"tight loop", "while (true) {}"},
		{"microtask storm", "while (true) { await null; }"},
		{"promise chain", "const spin = (): Promise<void> => Promise.resolve().then(spin); await spin();"},
		{"timer storm", "while (true) { await new Promise((r) => setTimeout(r, 0)); }"},
	} {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			wantResult(t, execute(t, env, 1, c.code, 50), module.ExitTimeout, module.ReasonTimeout)
			if elapsed := time.Since(start); elapsed > 3*time.Second {
				t.Errorf("took %v to stop a 50 ms timeout", elapsed)
			}
		})
	}
}

func TestKillMidLoop(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	done := make(chan module.Result)
	go func() {
		res, err := env.Execute(context.Background(), module.ExecutionInput{EID: 7, Code: `console.log("looping"); while (true) {}`, Options: module.Options{TimeoutMs: 60000}})
		if err != nil {
			t.Errorf("execute: %v", err)
		}
		done <- res
	}()
	rec.waitFor(t, "looping")
	if err := env.Kill(context.Background(), 7); err != nil {
		t.Fatalf("kill: %v", err)
	}
	select {
	case res := <-done:
		wantResult(t, res, module.ExitCanceled, module.ReasonKilled)
	case <-time.After(10 * time.Second):
		t.Fatal("kill did not stop the loop")
	}
	if err := env.Kill(context.Background(), 7); err != nil {
		t.Errorf("kill of a finished eid: %v", err)
	}
	if err := env.Kill(context.Background(), 12345); err != nil {
		t.Errorf("kill of an unknown eid: %v", err)
	}
}

func TestKillWhileAwaitingTool(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	rec.gatherN = 2 // never reached: the call waits until it is cancelled
	done := make(chan module.Result)
	go func() {
		res, _ := env.Execute(context.Background(), module.ExecutionInput{EID: 3, Code: `console.log("calling"); await cyrnel.services.t.tools.gather.invoke({ i: 1 });`, Options: module.Options{TimeoutMs: 60000}})
		done <- res
	}()
	rec.waitFor(t, "calling")
	if err := env.Kill(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	wantResult(t, <-done, module.ExitCanceled, module.ReasonKilled)
}

func TestQueuedBeyondConcurrencyAndKillWhileQueued(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, map[string]any{"concurrency": 1.0})
	first := make(chan module.Result)
	go func() {
		res, _ := env.Execute(context.Background(), module.ExecutionInput{EID: 1, Code: `console.log("first"); while (true) {}`, Options: module.Options{TimeoutMs: 60000}})
		first <- res
	}()
	rec.waitFor(t, "first")

	second := make(chan module.Result)
	go func() {
		res, _ := env.Execute(context.Background(), module.ExecutionInput{EID: 2, Code: `console.log("second")`, Options: module.Options{TimeoutMs: 60000}})
		second <- res
	}()
	rec.waitState(t, 2, module.StateQueued)
	if st := env.Status(); st["running"] != 1 || st["queued"] != 1 {
		t.Errorf("status = %v", st)
	}
	if err := env.Kill(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	wantResult(t, <-second, module.ExitCanceled, module.ReasonKilled)
	if got := rec.Stdout(2); got != "" {
		t.Errorf("a killed queued execution ran: %q", got)
	}
	if err := env.Kill(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	wantResult(t, <-first, module.ExitCanceled, module.ReasonKilled)

	// The slot is free again.
	wantResult(t, execute(t, env, 3, `console.log("third")`, 5000), module.ExitSuccess, module.ReasonCompleted)
	if got := rec.states[3]; !reflect.DeepEqual(got, []module.ExecState{module.StateQueued, module.StateRunning}) {
		t.Errorf("states = %v", got)
	}
}
