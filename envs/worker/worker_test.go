package worker

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/envtest"
	"github.com/cyrnel/cyrnel/envs/module"
)

// hostile starts a worker that announces itself, reads its execute request
// into req, then runs the given Python against the protocol pipes.
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
	script := "import os, json\nos.write(4, b'{\"jsonrpc\":\"2.0\",\"method\":\"ready\",\"params\":{}}\\n')\nreq = json.loads(os.read(3, 65536))\n" + attack
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

func TestOversizedMessageIsAnOutputLimit(t *testing.T) {
	t.Parallel()
	// A 20 MiB line that never ends: the host stops reading at 16 MiB, and
	// its own counter, not the worker, says why the execution ended.
	w := hostile(t, "os.write(4, b'{\"jsonrpc\":\"2.0\",\"method\":\"output\",\"params\":{\"patch\":{\"x\":\"' + b'a' * (20 << 20))\nimport time\ntime.sleep(60)")
	rec := envtest.NewRecorder()
	res, clean := w.Run(context.Background(), rec, Request{Input: module.ExecutionInput{EID: 1, Options: module.Options{TimeoutMs: 30000}}})
	if res.Exit != module.ExitFailed || res.Reason != module.ReasonOutputLimit || clean {
		t.Fatalf("got %+v clean=%v", res, clean)
	}
	r := rec.Get(1)
	if len(r.Output) != 0 {
		t.Fatalf("oversized message delivered: %d keys", len(r.Output))
	}
	if len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "16 MiB") {
		t.Fatalf("errors %q", r.Errors)
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

// answer is Python that answers the execute request with the given result.
func answer(result string) string {
	return "os.write(4, json.dumps({'jsonrpc': '2.0', 'id': req['id'], 'result': " + result + "}).encode() + b'\\n')\nimport time\ntime.sleep(60)"
}

// TestAnswersSayOnlySuccessOrFailed: a runtime that answers with the right
// id still cannot name a host-decided end; anything outside the protocol
// ends environment_error and the worker is not reused.
func TestAnswersSayOnlySuccessOrFailed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		result string
		want   module.Result
		clean  bool
	}{
		{`{'status': 'success'}`, module.Result{Exit: module.ExitSuccess, Reason: module.ReasonCompleted}, true},
		{`{'status': 'failed', 'error': 'ValueError: boom'}`, module.Result{Exit: module.ExitFailed, Reason: module.ReasonException}, true},
		{`{'status': 'failed', 'error': 'x', 'spent': True}`, module.Result{Exit: module.ExitFailed, Reason: module.ReasonException}, false},
		{`{'status': 'canceled', 'reason': 'killed'}`, module.Result{Exit: module.ExitFailed, Reason: module.ReasonEnvironmentError}, false},
		{`{'status': 'timeout', 'reason': 'timeout'}`, module.Result{Exit: module.ExitFailed, Reason: module.ReasonEnvironmentError}, false},
		{`{'status': 'failed', 'reason': 'memory_limit'}`, module.Result{Exit: module.ExitFailed, Reason: module.ReasonEnvironmentError}, false},
		{`{'status': 'failed', 'reason': 'output_limit'}`, module.Result{Exit: module.ExitFailed, Reason: module.ReasonEnvironmentError}, false},
		// Stopped before its deadline, unasked: a lie.
		{`{'status': 'stopped'}`, module.Result{Exit: module.ExitFailed, Reason: module.ReasonEnvironmentError}, false},
		{`None`, module.Result{Exit: module.ExitFailed, Reason: module.ReasonEnvironmentError}, false},
	}
	for _, c := range cases {
		t.Run(c.result, func(t *testing.T) {
			t.Parallel()
			w := hostile(t, answer(c.result))
			rec := envtest.NewRecorder()
			res, clean := w.Run(context.Background(), rec, Request{Input: module.ExecutionInput{EID: 1, Options: module.Options{TimeoutMs: 30000}}, Reuse: true})
			if res != c.want || clean != c.clean {
				t.Fatalf("got %+v clean=%v, want %+v clean=%v (errors %q)", res, clean, c.want, c.clean, rec.Get(1).Errors)
			}
		})
	}
}

// TestBlindForgedAnswerIsIgnored: an answer to id 0 (what jsonrpc2 would
// have used) written before the real one answers nothing.
func TestBlindForgedAnswerIsIgnored(t *testing.T) {
	t.Parallel()
	w := hostile(t, "os.write(4, b'{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"status\":\"success\"}}\\n')\n"+
		"os.write(4, b'{\"jsonrpc\":\"2.0\",\"method\":\"output\",\"params\":{\"patch\":{\"seen\":1}}}\\n')\n"+
		answer(`{'status': 'failed', 'error': 'ValueError: real'}`))
	rec := envtest.NewRecorder()
	res, _ := w.Run(context.Background(), rec, Request{Input: module.ExecutionInput{EID: 1, Options: module.Options{TimeoutMs: 30000}}})
	r := rec.Get(1)
	if res.Exit != module.ExitFailed || res.Reason != module.ReasonException || len(r.Errors) != 1 || r.Errors[0] != "ValueError: real" {
		t.Fatalf("got %+v errors %q", res, r.Errors)
	}
	// Control: frames written the same way do reach the host.
	if r.Output["seen"] != 1.0 {
		t.Fatalf("output %v: the frames did not reach the host", r.Output)
	}
}

// TestRuntimeErrorAnswerIsAnEnvironmentError: a JSON-RPC error answer to
// execute is the runtime's failure, never the program's.
func TestRuntimeErrorAnswerIsAnEnvironmentError(t *testing.T) {
	t.Parallel()
	w := hostile(t, "os.write(4, json.dumps({'jsonrpc': '2.0', 'id': req['id'], 'error': {'code': -32603, 'message': 'engine broke'}}).encode() + b'\\n')\nimport time\ntime.sleep(60)")
	rec := envtest.NewRecorder()
	res, clean := w.Run(context.Background(), rec, Request{Input: module.ExecutionInput{EID: 1, Options: module.Options{TimeoutMs: 30000}}, Reuse: true})
	if res.Exit != module.ExitFailed || res.Reason != module.ReasonEnvironmentError || clean {
		t.Fatalf("got %+v clean=%v", res, clean)
	}
	if r := rec.Get(1); len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "engine broke") {
		t.Fatalf("errors %q", r.Errors)
	}
}

// TestHostDecidesTheTimeout: the host's own timer ends the execution; a
// reusable runtime asked to stop that answers in its grace may serve again,
// and whatever it answers does not change the verdict.
func TestHostDecidesTheTimeout(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, attack string
		grace        time.Duration
		clean        bool
	}{
		{"silent", "import time\ntime.sleep(60)", 0, false},
		{"stops when asked", "os.read(3, 65536)\n" + answer(`{'status': 'stopped'}`), 5 * time.Second, true},
		{"claims success when asked", "os.read(3, 65536)\n" + answer(`{'status': 'success'}`), 5 * time.Second, true},
		{"claims a limit when asked", "os.read(3, 65536)\n" + answer(`{'status': 'failed', 'reason': 'memory_limit'}`), 5 * time.Second, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := hostile(t, c.attack)
			res, clean := w.Run(context.Background(), envtest.NewRecorder(), Request{Input: module.ExecutionInput{EID: 1, Options: module.Options{TimeoutMs: 200}}, Reuse: true, Grace: c.grace})
			if res.Exit != module.ExitTimeout || res.Reason != module.ReasonTimeout || clean != c.clean {
				t.Fatalf("got %+v clean=%v", res, clean)
			}
		})
	}
}

// FuzzDecodeReply: whatever a worker answers, the host accepts only the
// three statuses a runtime may report, and never panics.
func FuzzDecodeReply(f *testing.F) {
	for _, s := range []string{`{"status":"success"}`, `{"status":"failed","error":"x","spent":true}`, `{"status":"stopped"}`,
		`{"status":"timeout","reason":"timeout"}`, `null`, `{"status":"failed"}{"status":"success"}`, `[]`, `{"status":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		boxed, _ := json.Marshal(string(raw)) // as the stream hands answers on
		rep, err := decodeReply(boxed)
		if err == nil && rep.Status != replySuccess && rep.Status != replyFailed && rep.Status != replyStopped {
			t.Fatalf("accepted status %q", rep.Status)
		}
	})
}

// TestOutOfMemoryTextSplitBetweenReads: the runtime's out-of-memory text is
// seen whole, in one read or split between two, and only the text counts.
func TestOutOfMemoryTextSplitBetweenReads(t *testing.T) {
	t.Parallel()
	const text = "fatal error: runtime: out of memory"
	for _, c := range []struct {
		reads []string
		want  bool
	}{
		{[]string{"goroutine 1 [running]:\n", "fatal error: runtime: out of memory\n"}, true},
		{[]string{"xx fatal error: runt", "ime: out of memory\n"}, true},
		{[]string{"fatal error: runtime: out of memor", "y"}, true},
		{[]string{"f", "atal error: runtime: out of memory"}, true},
		{[]string{"fatal error: runtime: out of memor", "ies"[1:]}, false},
		{[]string{"fatal error: all goroutines are asleep\n"}, false},
	} {
		w := &Worker{oomTexts: []string{"fatal error: out of memory", text}}
		var carry []byte
		for _, r := range c.reads {
			carry = w.watchOutOfMemory(carry, []byte(r))
		}
		if got := w.outOfMemory.Load(); got != c.want {
			t.Errorf("reads %q: out of memory %v, want %v", c.reads, got, c.want)
		}
	}
}
