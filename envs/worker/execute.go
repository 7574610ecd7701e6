package worker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sourcegraph/jsonrpc2"
	"golang.org/x/sync/semaphore"

	"github.com/cyrnel/cyrnel/envs/module"
)

// outputGrace is how long to wait, after the runtime answered, for its output
// pipes to reach end-of-file (only children still holding them delay it), and
// for a worker whose stream broke to end by itself.
const outputGrace = 100 * time.Millisecond

// Request is one execution handed to a worker.
type Request struct {
	Input module.ExecutionInput
	// OutputLimit caps each of stdout and stderr in bytes (0: no cap); past
	// it the worker is stopped and the execution fails with output_limit.
	OutputLimit int64
	// Reuse: the worker serves more executions after this one, so its
	// output pipes stay open (its runtime sends output as notifications).
	Reuse bool
	// Grace: on a kill or the timeout, the runtime is asked to stop (a
	// cancel notification) and gets this long to answer, so its worker can
	// serve again, before its process is killed. 0: killed at once.
	Grace time.Duration
	// Stubs: see RunnerConfig.
	Stubs ToolStubs
}

// executeParams are the params of an execute request (docs/protocol.md).
type executeParams struct {
	EID       int64          `json:"eid"`
	Code      string         `json:"code"`
	TimeoutMs int64          `json:"timeoutMs"`
	EnvConfig map[string]any `json:"envConfig"`
	Files     []executeFile  `json:"files,omitempty"`
}

// executeFile is a file for the program's workspace.
type executeFile struct {
	Path string `json:"path"`
	Data []byte `json:"data"`
}

// executeReply is all a runtime may say about how a program ended: it ran
// to the end (success), it raised (failed, with the error text), or it
// stopped because the host asked it to or its deadline passed (stopped).
// Every other exit state and reason is the host's to decide, from its own
// timer, its own kill, the cgroup's counters and its own output counters: a
// Python program shares its interpreter with the runtime and can write any
// frame to fd 4 (docs/protocol.md).
type executeReply struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	// Spent: the runtime cannot serve again (a program it gave up on still
	// runs inside it).
	Spent bool `json:"spent"`
}

// The statuses of an executeReply.
const (
	replySuccess = "success"
	replyFailed  = "failed"
	replyStopped = "stopped"
)

// decodeReply reads an execute answer strictly: a field or a status outside
// the protocol is a protocol error, never a hint the host acts on.
func decodeReply(boxed json.RawMessage) (executeReply, error) {
	var rep executeReply
	raw, err := unbox(boxed)
	if err != nil {
		return rep, fmt.Errorf("execute answer: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		return rep, fmt.Errorf("execute answer: %w", err)
	}
	switch rep.Status {
	case replySuccess, replyFailed, replyStopped:
		return rep, nil
	}
	return rep, fmt.Errorf("execute answer: status %q is not one a runtime may report", rep.Status)
}

// maxErrorText bounds the error message a worker may report.
const maxErrorText = 64 << 10

// outcome is how an execution ended, as the host decided it.
type outcome struct {
	res   module.Result
	msg   string // the error text, when there is one
	clean bool   // the worker may serve again (with Reuse)
}

// Run executes one program in the worker and returns how it ended. Every
// byte of output has been emitted when it returns. clean says the worker
// answered within the protocol and may serve again (with Reuse); otherwise it
// is spent and the caller must Close it, which can happen off the critical
// path. Cancelling ctx kills the execution (canceled); the timeout is
// enforced here: the host's own timer decides timeout, never the runtime.
func (w *Worker) Run(ctx context.Context, b module.Bindings, req Request) (module.Result, bool) {
	in := req.Input
	timeout := time.Duration(in.Options.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = module.DefaultTimeoutMs * time.Millisecond
	}
	// The host's own clock, paused while a tool call waits on a human.
	timer := newDeadline(timeout)
	defer timer.stop()
	frames := frameLimit(req.OutputLimit)
	callsCtx, cancelCalls := context.WithCancel(ctx)
	e := &execution{eid: in.EID, b: b, ctx: module.WithPause(callsCtx, timer.pause), cancel: cancelCalls, limit: req.OutputLimit, stubs: req.Stubs,
		budget: semaphore.NewWeighted(frames), budgetSize: frames}
	w.cur.Store(e)
	defer w.cur.Store(nil)
	// What the program writes to the host is bounded by its own limit, from
	// before the runtime hears of it until the answer is read.
	w.setFrameLimit(frames)
	defer w.setFrameLimit(0)

	w.resetUsage()
	if w.follow {
		defer w.runsLong()()
	}
	b.SetState(in.EID, module.StateRunning)
	// The call outlives ctx: after a kill a graceful runtime still answers.
	callCtx, cancelCall := context.WithCancel(context.Background())
	defer cancelCall()
	var raw json.RawMessage
	replied := make(chan error, 1)
	// An id the program cannot guess: a frame it writes to fd 4 blindly
	// ({"id":0,…}) answers nothing and is ignored.
	id := jsonrpc2.PickID(jsonrpc2.ID{Str: rand.Text(), IsString: true})
	go func() {
		params := executeParams{EID: in.EID, Code: in.Code, TimeoutMs: timeout.Milliseconds(), EnvConfig: in.EnvConfig}
		for _, f := range in.Files {
			params.Files = append(params.Files, executeFile{Path: f.Path, Data: f.Content})
		}
		replied <- w.conn.Call(callCtx, "execute", params, &raw, id)
	}()

	var out outcome
	stopped := false // the host decided how it ended and stopped it
	select {
	case err := <-replied:
		out = w.answered(err, raw, req.Reuse, timer.passed())
	case <-w.h.Done():
		out.res, out.msg = w.died()
	case <-timer.C():
		stopped = true
		out = w.stop(in.EID, req.Grace, replied, &raw, module.Result{Exit: module.ExitTimeout, Reason: module.ReasonTimeout})
	case <-ctx.Done():
		stopped = true
		out = w.stop(in.EID, req.Grace, replied, &raw, module.Result{Exit: module.ExitCanceled, Reason: module.ReasonKilled})
	}
	if !out.clean {
		w.h.Kill()
		w.drain()
	}
	e.end()
	// A worker a resource limit had already ended reports that limit,
	// whichever of timeout or kill the host saw first.
	if out.res.Exit == module.ExitTimeout || out.res.Exit == module.ExitCanceled {
		if r, m, ok := w.limitEnded(); ok {
			out.res, out.msg = r, m
		}
	}
	// The host's own counters: what it read past a limit, it stopped.
	if !stopped && out.res.Exit != module.ExitTimeout {
		switch {
		case e.overLimit.Load():
			out = outcome{res: module.Result{Exit: module.ExitFailed, Reason: module.ReasonOutputLimit},
				msg: fmt.Sprintf("%s exceeded the output limit of %d bytes", [2]string{"stdout", "stderr"}[e.overWhich.Load()], e.limit)}
		case errors.Is(w.stream.err(), errMessageTooLarge) || errors.Is(w.directS.err(), errMessageTooLarge):
			out = outcome{res: module.Result{Exit: module.ExitFailed, Reason: module.ReasonOutputLimit}, msg: tooLargeText(req.OutputLimit)}
		}
	}
	if out.res.Exit == module.ExitTimeout && out.msg == "" {
		out.msg = fmt.Sprintf("execution exceeded its timeout of %d ms", timeout.Milliseconds())
	}
	if len(out.msg) > maxErrorText {
		out.msg = out.msg[:maxErrorText] + "…"
	}
	if out.msg != "" && (out.res.Exit == module.ExitFailed || out.res.Exit == module.ExitTimeout) {
		b.SetError(in.EID, out.msg)
	}
	return w.withUsage(out.res), out.clean
}

// tooLargeText says why a message past its limit ended an execution.
func tooLargeText(outputLimit int64) string {
	const what = "a message to the host (an output value, a display, a tool call's parameters)"
	if frameLimit(outputLimit) == maxMessage {
		return fmt.Sprintf("%s exceeded the protocol's limit of %d MiB", what, maxMessage>>20)
	}
	return fmt.Sprintf("%s exceeded %d bytes: the output limit of %d bytes and %d KiB for the protocol", what, frameLimit(outputLimit), outputLimit, frameEnvelope>>10)
}

// answered turns the runtime's answer, before the host stopped anything,
// into an outcome. late: the host's own deadline has passed.
func (w *Worker) answered(err error, raw json.RawMessage, reuse, late bool) outcome {
	if err != nil {
		var rpcErr *jsonrpc2.Error
		if errors.As(err, &rpcErr) {
			// The runtime could not run the program: its failure, not
			// the program's.
			return outcome{res: environmentError, msg: "the runtime failed: " + rpcErr.Message}
		}
		// The stream broke: the process is dying (let it report how)
		// or wrote garbage on fd 4 (kill it).
		if !w.waitExit(outputGrace) {
			w.h.Kill()
		}
		res, msg := w.died()
		return outcome{res: res, msg: msg}
	}
	rep, err := decodeReply(raw)
	if err == nil && rep.Status == replyStopped && !late {
		err = errors.New("execute answer: the runtime stopped the program unasked, before its deadline")
	}
	if err != nil {
		return outcome{res: environmentError, msg: "worker protocol error: " + err.Error()}
	}
	out := outcome{clean: !rep.Spent}
	switch rep.Status {
	case replySuccess:
		out.res = module.Result{Exit: module.ExitSuccess, Reason: module.ReasonCompleted}
	case replyFailed:
		out.res, out.msg = module.Result{Exit: module.ExitFailed, Reason: module.ReasonException}, rep.Error
	case replyStopped:
		out.res = module.Result{Exit: module.ExitTimeout, Reason: module.ReasonTimeout}
	}
	if !reuse && !w.waitStreams(outputGrace) {
		// The runtime released its stdout and stderr before answering;
		// something it started still holds them.
		w.h.Kill()
		w.drain()
	}
	return out
}

var environmentError = module.Result{Exit: module.ExitFailed, Reason: module.ReasonEnvironmentError}

// stop ends an execution the host decided the end of: a reusable runtime is
// asked to stop (a cancel notification) and gets grace to answer, which only
// says whether it may serve again; otherwise the worker is killed.
func (w *Worker) stop(eid int64, grace time.Duration, replied <-chan error, raw *json.RawMessage, decided module.Result) outcome {
	out := outcome{res: decided}
	if grace <= 0 {
		return out
	}
	_ = w.conn.Notify(context.Background(), "cancel", map[string]any{"eid": eid})
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-replied:
		if err == nil {
			rep, err := decodeReply(*raw)
			out.clean = err == nil && !rep.Spent
		}
	case <-t.C:
	}
	return out
}

// died explains a worker that ended without answering.
func (w *Worker) died() (module.Result, string) {
	<-w.h.Done()
	x := w.h.Exit()
	if !x.MemoryLimit && len(w.oomTexts) > 0 {
		w.drain() // its last words say whether its runtime ran out of memory
	}
	switch {
	case x.MemoryLimit || w.outOfMemory.Load():
		return module.Result{Exit: module.ExitFailed, Reason: module.ReasonMemoryLimit}, "memory limit exceeded"
	case x.CPULimit:
		return module.Result{Exit: module.ExitFailed, Reason: module.ReasonCPULimit}, "CPU time limit exceeded"
	}
	if err := w.stream.err(); err != nil && !errors.Is(err, io.EOF) {
		return environmentError, fmt.Sprintf("worker protocol error: %v", err)
	}
	return environmentError, fmt.Sprintf("the runtime exited before the program finished (%s)", x)
}
