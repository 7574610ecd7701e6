package worker

import (
	"context"
	"fmt"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
)

// Request is one execution handed to a worker.
type Request struct {
	Input module.ExecutionInput
	// OutputLimit caps each of stdout and stderr in bytes (0: no cap); past
	// it the worker is stopped and the execution fails with output_limit.
	OutputLimit int64
}

type executeReply struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

// outputGrace is how long to wait, after the runtime answered, for its output
// pipes to reach end-of-file; only children still holding them delay it.
const outputGrace = 100 * time.Millisecond

// Run executes one program in the worker. Every byte of output has been
// emitted when it returns. The worker is spent: the caller must Close it
// (which can happen off the critical path). Cancelling ctx kills the
// execution (canceled); the timeout is enforced here.
func (w *Worker) Run(ctx context.Context, b module.Bindings, req Request) module.Result {
	in := req.Input
	callCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	e := &execution{eid: in.EID, b: b, ctx: callCtx, limit: req.OutputLimit}
	w.cur.Store(e)

	timeout := time.Duration(in.Options.TimeoutMs) * time.Millisecond
	if timeout <= 0 {
		timeout = module.DefaultTimeoutMs * time.Millisecond
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()

	b.SetState(in.EID, module.StateRunning)
	var rep executeReply
	replied := make(chan error, 1)
	go func() {
		replied <- w.conn.Call(callCtx, "execute", map[string]any{
			"eid": in.EID, "code": in.Code, "timeoutMs": in.Options.TimeoutMs, "envConfig": in.EnvConfig,
		}, &rep)
	}()

	var res module.Result
	var msg string
	select {
	case err := <-replied:
		if err != nil && ctx.Err() != nil {
			res = module.Result{Exit: module.ExitCanceled, Reason: module.ReasonKilled}
			break
		}
		if err != nil {
			// The stream broke: the process is dying (let it report how)
			// or wrote garbage on fd 4 (kill it).
			if !w.waitExit(outputGrace) {
				w.h.Kill()
			}
			res, msg = w.died()
			break
		}
		// The runtime released its stdout and stderr before answering.
		if !w.waitStreams(outputGrace) {
			w.h.Kill()
			w.drain()
		}
		switch rep.Status {
		case "success":
			res = module.Result{Exit: module.ExitSuccess, Reason: module.ReasonCompleted}
		default:
			res = module.Result{Exit: module.ExitFailed, Reason: module.Reason(rep.Reason)}
			if res.Reason == "" {
				res.Reason = module.ReasonException
			}
			msg = rep.Error
		}
	case <-w.h.Done():
		res, msg = w.died()
	case <-timer.C:
		res = module.Result{Exit: module.ExitTimeout, Reason: module.ReasonTimeout}
		msg = fmt.Sprintf("execution exceeded its timeout of %d ms", timeout.Milliseconds())
	case <-ctx.Done():
		res = module.Result{Exit: module.ExitCanceled, Reason: module.ReasonKilled}
	}
	w.h.Kill() // idempotent; a no-op when the runtime answered
	w.drain()
	if e.overLimit.Load() && res.Exit != module.ExitTimeout && res.Exit != module.ExitCanceled {
		res = module.Result{Exit: module.ExitFailed, Reason: module.ReasonOutputLimit}
		msg = fmt.Sprintf("%s exceeded the output limit of %d bytes", [2]string{"stdout", "stderr"}[e.overWhich.Load()], e.limit)
	}
	if msg != "" {
		b.SetError(in.EID, msg)
	}
	w.cur.Store(nil)
	return res
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
