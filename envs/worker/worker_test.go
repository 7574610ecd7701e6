package worker

import (
	"context"
	"io"
	"log/slog"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/envs/envtest"
	"github.com/cyrnel/cyrnel/envs/module"
)

// hostile starts a worker that announces itself, waits for its execute
// request, then runs the given Python against the protocol pipes.
func hostile(t *testing.T, attack string) *Worker {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is required: %v", err)
	}
	real, err := exec.Command(python, "-c", "import sys; print(sys.executable)").Output()
	if err != nil {
		t.Fatal(err)
	}
	script := "import os\nos.write(4, b'{\"jsonrpc\":\"2.0\",\"method\":\"ready\",\"params\":{}}\\n')\nos.read(3, 65536)\n" + attack
	w, err := Start(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), Plain{},
		Command{Path: strings.TrimSpace(string(real)), Args: []string{"-I", "-S", "-c", script}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	if err := w.WaitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	return w
}

func TestOversizedMessageEndsTheWorker(t *testing.T) {
	// A 20 MiB line that never ends: the host stops reading at 16 MiB.
	w := hostile(t, "os.write(4, b'{\"jsonrpc\":\"2.0\",\"method\":\"output\",\"params\":{\"patch\":{\"x\":\"' + b'a' * (20 << 20))\nimport time\ntime.sleep(60)")
	rec := envtest.NewRecorder()
	res, _ := w.Run(context.Background(), rec, Request{Input: module.ExecutionInput{EID: 1, Options: module.Options{TimeoutMs: 30000}}})
	if res.Exit != module.ExitFailed || res.Reason != module.ReasonEnvironmentError {
		t.Fatalf("got %+v", res)
	}
	if r := rec.Get(1); len(r.Output) != 0 {
		t.Fatalf("oversized message delivered: %d keys", len(r.Output))
	}
}

func TestRequestFloodIsBounded(t *testing.T) {
	// Requests sent without ever reading the answers.
	w := hostile(t, "n = 0\nwhile True:\n    n += 1\n    os.write(4, b'{\"jsonrpc\":\"2.0\",\"id\":%d,\"method\":\"nope\"}\\n' % n)")
	before := runtime.NumGoroutine()
	done := make(chan module.Result, 1)
	go func() {
		res, _ := w.Run(context.Background(), envtest.NewRecorder(), Request{Input: module.ExecutionInput{EID: 1, Options: module.Options{TimeoutMs: 1000}}})
		done <- res
	}()
	peak := 0
	for {
		select {
		case res := <-done:
			if res.Exit != module.ExitTimeout {
				t.Fatalf("got %+v", res)
			}
			if peak-before > 2*maxCalls {
				t.Fatalf("%d goroutines for one worker's requests", peak-before)
			}
			return
		default:
			peak = max(peak, runtime.NumGoroutine())
			runtime.Gosched()
		}
	}
}

func TestForgedReasonsAreNotTaken(t *testing.T) {
	for status, want := range map[string]module.Result{
		"failed":  {Exit: module.ExitFailed, Reason: module.ReasonException},
		"success": {Exit: module.ExitSuccess, Reason: module.ReasonCompleted},
		"bogus":   {Exit: module.ExitFailed, Reason: module.ReasonException},
	} {
		if got := replyResult(executeReply{Status: status, Reason: "host_restart"}); got != want {
			t.Errorf("%s/host_restart: got %+v", status, got)
		}
	}
	if got := replyResult(executeReply{Status: "failed", Reason: "memory_limit"}); got.Reason != module.ReasonMemoryLimit {
		t.Errorf("a runtime's own memory_limit: %+v", got)
	}
}
