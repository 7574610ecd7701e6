package worker

import (
	"context"
	"fmt"
	"slices"
	"time"

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
	// Grace: on a kill, the runtime is asked to stop (a cancel notification)
	// and gets this long before its process is killed; the runtime enforces
	// timeoutMs itself and the host only backs it up after this long.
	Grace time.Duration
}

type executeReply struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Reason string `json:"reason"`
	// Spent: the runtime cannot serve again (a program it gave up on still
	// runs inside it).
	Spent bool `json:"spent"`
}

// maxErrorText bounds the error message a worker may report.
const maxErrorText = 64 << 10

// Run executes one program in the worker and returns how it ended. Every
// byte of output has been emitted when it returns. clean says the worker
// answered and may serve again (with Reuse); otherwise it is spent and the
// caller must Close it, which can happen off the critical path. Cancelling
// ctx kills the execution (canceled); the timeout is enforced here.
func (w *Worker) Run(ctx context.Context, b module.Bindings, req Request) (res module.Result, clean bool) {
	in := req.Input
	timeout := time.Duration(in.Options.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = module.DefaultTimeoutMs * time.Millisecond
	}
	timer := newDeadline(timeout + req.Grace)
	defer timer.stop()
	e := &execution{eid: in.EID, b: b, ctx: module.WithPause(ctx, timer.pause), limit: req.OutputLimit}
	w.cur.Store(e)
	defer w.cur.Store(nil)

	b.SetState(in.EID, module.StateRunning)
	// The call outlives ctx: after a kill a graceful runtime still answers.
	callCtx, cancelCall := context.WithCancel(context.Background())
	defer cancelCall()
	var rep executeReply
	replied := make(chan error, 1)
	go func() {
		replied <- w.conn.Call(callCtx, "execute", map[string]any{
			"eid": in.EID, "code": in.Code, "timeoutMs": timeout.Milliseconds(), "envConfig": in.EnvConfig,
		}, &rep)
	}()

	var msg string
	answered := func(err error) {
		if err != nil {
			// The stream broke: the process is dying (let it report how)
			// or wrote garbage on fd 4 (kill it).
			if !w.waitExit(outputGrace) {
				w.h.Kill()
			}
			res, msg = w.died()
			return
		}
		if !req.Reuse && !w.waitStreams(outputGrace) {
			// The runtime released its stdout and stderr before answering;
			// something it started still holds them.
			w.h.Kill()
			w.drain()
		}
		res, msg, clean = replyResult(rep), rep.Error, !rep.Spent
		if len(msg) > maxErrorText {
			msg = msg[:maxErrorText] + "…"
		}
	}
	killed := module.Result{Exit: module.ExitCanceled, Reason: module.ReasonKilled}
	select {
	case err := <-replied:
		answered(err)
	case <-w.h.Done():
		res, msg = w.died()
	case <-timer.C():
		res = module.Result{Exit: module.ExitTimeout, Reason: module.ReasonTimeout}
	case <-ctx.Done():
		res = killed
		if req.Grace > 0 {
			_ = w.conn.Notify(context.Background(), "cancel", map[string]any{"eid": in.EID})
			grace := time.NewTimer(req.Grace)
			select {
			case err := <-replied:
				answered(err)
			case <-grace.C:
			}
			grace.Stop()
		}
	}
	if !clean {
		w.h.Kill()
		w.drain()
	}
	if e.overLimit.Load() && res.Exit != module.ExitTimeout && res.Exit != module.ExitCanceled {
		res, clean = module.Result{Exit: module.ExitFailed, Reason: module.ReasonOutputLimit}, false
		msg = fmt.Sprintf("%s exceeded the output limit of %d bytes", [2]string{"stdout", "stderr"}[e.overWhich.Load()], e.limit)
	}
	if res.Exit == module.ExitTimeout && msg == "" {
		msg = fmt.Sprintf("execution exceeded its timeout of %d ms", timeout.Milliseconds())
	}
	if msg != "" && (res.Exit == module.ExitFailed || res.Exit == module.ExitTimeout) {
		b.SetError(in.EID, msg)
	}
	return res, clean
}

// replyResult turns a worker's answer into a result. The worker side is
// untrusted: a reason is kept only when it is one a runtime may report for
// that exit state, never one the host reports (host_restart, …).
func replyResult(rep executeReply) module.Result {
	exit := module.ExitState(rep.Status)
	if !exit.Valid() {
		exit = module.ExitFailed
	}
	allowed := map[module.ExitState][]module.Reason{
		module.ExitSuccess:  {module.ReasonCompleted},
		module.ExitFailed:   {module.ReasonException, module.ReasonMemoryLimit, module.ReasonEnvironmentError},
		module.ExitTimeout:  {module.ReasonTimeout},
		module.ExitCanceled: {module.ReasonKilled},
	}[exit]
	reason := allowed[0]
	if slices.Contains(allowed, module.Reason(rep.Reason)) {
		reason = module.Reason(rep.Reason)
	}
	return module.Result{Exit: exit, Reason: reason}
}

// died explains a worker that ended without answering.
func (w *Worker) died() (module.Result, string) {
	<-w.h.Done()
	x := w.h.Exit()
	switch {
	case x.MemoryLimit:
		return module.Result{Exit: module.ExitFailed, Reason: module.ReasonMemoryLimit}, "memory limit exceeded"
	case x.CPULimit:
		return module.Result{Exit: module.ExitFailed, Reason: module.ReasonCPULimit}, "CPU time limit exceeded"
	}
	return module.Result{Exit: module.ExitFailed, Reason: module.ReasonEnvironmentError},
		fmt.Sprintf("the runtime exited before the program finished (%s)", x)
}
