package typescript

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
)

// asking answers tool t.ask as the host's gate answers an ask-policy call:
// it pauses the execution's clock (when pause is set), says it is waiting,
// and returns once decide is closed.
type asking struct {
	*recorder
	pause  bool
	asked  chan struct{}
	decide chan struct{}
}

func (a *asking) ListTools(ctx context.Context) ([]module.Tool, error) {
	return append(testTools, module.Tool{ServiceID: "t", ToolID: "ask", Name: "Ask", Description: "Waits for a decision."}), nil
}

func (a *asking) InvokeTool(ctx context.Context, in module.InvokeInput) (any, error) {
	if in.ToolID != "ask" {
		return a.recorder.InvokeTool(ctx, in)
	}
	if a.pause {
		defer module.Pause(ctx)()
	}
	a.asked <- struct{}{}
	select {
	case <-a.decide:
		return "approved", nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// The time a tool call waits on a human does not count against the
// execution's timeout; the clock runs again once the call is decided.
func TestSuspendedTimeDoesNotCount(t *testing.T) {
	t.Parallel()
	const timeoutMs = 500
	for _, c := range []struct {
		name   string
		pause  bool
		code   string
		exit   module.ExitState
		reason module.Reason
	}{
		{"paused", true, `console.log(await cyrnel.services.t.tools.ask.invoke({}));`, module.ExitSuccess, module.ReasonCompleted},
		{"runs again after the decision", true, `await cyrnel.services.t.tools.ask.invoke({}); while (true) {}`, module.ExitTimeout, module.ReasonTimeout},
		// The control: the same wait without the pause times out.
		{"not paused", false, `console.log(await cyrnel.services.t.tools.ask.invoke({}));`, module.ExitTimeout, module.ReasonTimeout},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := &asking{recorder: newRecorder(), pause: c.pause, asked: make(chan struct{}), decide: make(chan struct{})}
			env := New(nil)
			if err := env.Setup(context.Background(), module.SetupContext{Bindings: b}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { env.Teardown(context.Background()) })
			done := make(chan module.Result, 1)
			go func() {
				res, err := env.Execute(context.Background(), module.ExecutionInput{EID: 1, Code: c.code, Options: module.Options{TimeoutMs: timeoutMs}})
				if err != nil {
					t.Errorf("execute: %v", err)
				}
				done <- res
			}()
			select {
			case <-b.asked:
			case res := <-done:
				t.Fatalf("ended before its call: %+v (stderr %q)", res, b.Stderr(1))
			}
			// The decision comes after twice the timeout: this wait is
			// what the test is about.
			time.Sleep(2 * timeoutMs * time.Millisecond)
			close(b.decide)
			res := <-done
			wantResult(t, res, c.exit, c.reason)
			if c.exit == module.ExitSuccess && !strings.Contains(b.Stdout(1), "approved") {
				t.Errorf("stdout = %q", b.Stdout(1))
			}
		})
	}
}
