package typescript

import (
	"container/heap"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/dop251/goja"

	"github.com/cyrnel/cyrnel/envs/module"
)

// stopCause records why a run was interrupted; the first cause wins, so a
// timeout is never reported as a kill or the other way round.
type stopCause int32

const (
	stopTimeout stopCause = iota + 1
	stopKilled
)

// run is one execution. goja is not goroutine-safe: the goroutine that runs
// execute owns the runtime and is the event loop. Other goroutines (tool
// calls, the watchdog, Run waiting for the result) only post jobs to it or
// interrupt it.
type run struct {
	opts Options
	prog *compiled
	cb   Callbacks
	vm   *goja.Runtime

	// ctx is handed to host calls and ends with the run, so abandoned tool
	// calls are cancelled.
	ctx    context.Context
	cancel context.CancelFunc
	parent context.Context

	cause    atomic.Int32
	stopped  chan struct{} // closed on the first stop
	finished chan struct{} // closed when execute returns
	jobs     chan func()   // completions posted by tool goroutines

	// Owned by the loop goroutine.
	main      *goja.Promise
	fatal     error           // uncatchable errors and exceptions thrown by timer callbacks
	unhandled []*goja.Promise // rejected promises that have no handler yet
	pending   int             // timers and tool calls that can still settle a promise
	toolQueue []*toolCall
	inflight  int
	timers    timerHeap
	timerByID map[int64]*timer
	lastTimer int64
	clock     *time.Timer
	// turn is when the current macrotask began: delays count from it, as
	// Node counts them from its loop's cached time, so timers set in one
	// turn fire in the order of their delays however long the turn runs.
	turn time.Time

	stringify, parse goja.Callable
	errorCtor        goja.Value
	objectProto      *goja.Object
	tools            *toolIndex
	servicesObj      *goja.Object
}

// newRun builds a fresh runtime with its globals, for one program; begin
// gives it that program.
func newRun(opts Options) (r *run, err error) {
	// A bug in the engine must fail this run only, as one in execute does.
	defer func() {
		if x := recover(); x != nil {
			r, err = nil, fmt.Errorf("setting up the runtime: internal error: %v", x)
		}
	}()
	r = &run{
		opts:      opts,
		vm:        goja.New(),
		stopped:   make(chan struct{}),
		finished:  make(chan struct{}),
		jobs:      make(chan func()),
		timerByID: map[int64]*timer{},
	}
	if err := r.install(); err != nil {
		return nil, fmt.Errorf("setting up the runtime: %w", err)
	}
	return r, nil
}

// begin binds r to its execution.
func (r *run) begin(ctx context.Context, prog *compiled, cb Callbacks) {
	// Host calls see cancellation only through stop, which interrupts the
	// runtime first: a tool call failing with "context canceled" can then
	// never be mistaken for the program's own failure.
	r.ctx, r.cancel = context.WithCancel(context.WithoutCancel(ctx))
	r.parent, r.prog, r.cb = ctx, prog, cb
}

func (r *run) execute(deadline time.Time) (res Result) {
	defer func() {
		close(r.finished)
		r.cancel()
		if r.clock != nil {
			r.clock.Stop()
		}
		// A bug in the engine or a panicking callback must end this run only.
		if x := recover(); x != nil {
			res = Result{Exit: module.ExitFailed, Reason: module.ReasonEnvironmentError, Error: fmt.Sprintf("typescript: internal error: %v", x)}
		}
	}()
	go r.watch(deadline)
	r.turn = time.Now()
	v, err := r.vm.RunProgram(r.prog.prg)
	if err != nil {
		return r.failure(err)
	}
	p, ok := v.Export().(*goja.Promise)
	if !ok {
		// Only code that closes the wrapper's function itself gets here.
		const msg = `SyntaxError: the program closes the async function it runs in (an extra "})")`
		r.cb.Stderr([]byte(msg + "\n"))
		return Result{Exit: module.ExitFailed, Reason: module.ReasonException, Error: msg}
	}
	r.main = p
	return r.loop()
}

// watch interrupts the runtime at the deadline (zero: none) or when the
// caller kills the run.
func (r *run) watch(deadline time.Time) {
	var due <-chan time.Time
	if !deadline.IsZero() {
		t := time.NewTimer(time.Until(deadline))
		defer t.Stop()
		due = t.C
	}
	select {
	case <-r.parent.Done():
		r.stop(stopKilled)
	case <-due:
		r.stop(stopTimeout)
	case <-r.finished:
	}
}

func (r *run) stop(c stopCause) {
	if !r.cause.CompareAndSwap(0, int32(c)) {
		return
	}
	// Interrupt stops JavaScript that is running (tight loops and microtask
	// storms alike); the closed channel wakes a loop that is waiting.
	r.vm.Interrupt(c)
	r.cancel()
	close(r.stopped)
}

// loop runs one macrotask (a tool completion or a timer) at a time until the
// program's top-level promise settles. goja drains microtasks after every
// call into the runtime.
func (r *run) loop() Result {
	for {
		select {
		case <-r.stopped:
			return r.stoppedResult()
		default:
		}
		if r.fatal != nil {
			return r.failure(r.fatal)
		}
		if res, done := r.settled(); done {
			return res
		}
		if r.pending == 0 {
			const msg = "Error: the program awaits a promise that can never settle (no timer or tool call is pending)"
			r.cb.Stderr([]byte(msg + "\n"))
			return Result{Exit: module.ExitFailed, Reason: module.ReasonException, Error: msg}
		}
		var clock <-chan time.Time
		if r.clock != nil {
			clock = r.clock.C
		}
		select {
		case job := <-r.jobs:
			r.turn = time.Now()
			job()
		case <-clock:
			r.turn = time.Now()
			r.fireTimer()
		case <-r.stopped:
			return r.stoppedResult()
		}
	}
}

// settled reports the result once the program is over: its top-level
// promise rejected, another promise was rejected with nobody to handle it
// (as Node does), or the top-level promise fulfilled.
func (r *run) settled() (Result, bool) {
	if r.main.State() == goja.PromiseStateRejected {
		return r.uncaught(r.main.Result(), nil, ""), true
	}
	for _, p := range r.unhandled {
		if p != r.main {
			return r.uncaught(p.Result(), nil, "Unhandled promise rejection: "), true
		}
	}
	if r.main.State() == goja.PromiseStateFulfilled {
		return Result{Exit: module.ExitSuccess, Reason: module.ReasonCompleted}, true
	}
	return Result{}, false
}

func (r *run) trackRejection(p *goja.Promise, op goja.PromiseRejectionOperation) {
	switch op {
	case goja.PromiseRejectionReject:
		r.unhandled = append(r.unhandled, p)
	case goja.PromiseRejectionHandle:
		for i, q := range r.unhandled {
			if q == p {
				r.unhandled = append(r.unhandled[:i], r.unhandled[i+1:]...)
				break
			}
		}
	}
}

func (r *run) stoppedResult() Result {
	if stopCause(r.cause.Load()) == stopTimeout {
		return Result{Exit: module.ExitTimeout, Reason: module.ReasonTimeout}
	}
	return Result{Exit: module.ExitCanceled, Reason: module.ReasonKilled}
}

// failure turns an error out of the runtime into a result.
func (r *run) failure(err error) Result {
	var interrupted *goja.InterruptedError
	var overflow *goja.StackOverflowError
	var ex *goja.Exception
	switch {
	case errors.As(err, &interrupted):
		return r.stoppedResult()
	case errors.As(err, &overflow):
		// goja's overflow is uncatchable; report it as the RangeError other
		// engines throw.
		const header = "RangeError: Maximum call stack size exceeded"
		r.cb.Stderr([]byte(header + "\n" + formatFrames(r.gojaFrames(overflow.Stack()))))
		return Result{Exit: module.ExitFailed, Reason: module.ReasonException, Error: header}
	case errors.As(err, &ex):
		return r.uncaught(ex.Value(), ex.Stack(), "")
	}
	return Result{Exit: module.ExitFailed, Reason: module.ReasonEnvironmentError, Error: fmt.Sprintf("typescript: %v", err)}
}

// uncaught reports a thrown or rejected value: "Name: message" as the error,
// the stack with TypeScript positions on stderr.
func (r *run) uncaught(v goja.Value, thrownAt []goja.StackFrame, prefix string) Result {
	header, frames := "Uncaught exception", ""
	if err := r.guard(func() { header, frames = r.describe(v) }); err != nil {
		header = "Uncaught exception (describing it failed: " + err.Error() + ")"
	}
	if frames == "" {
		frames = formatFrames(r.gojaFrames(thrownAt))
	}
	r.cb.Stderr([]byte(prefix + header + "\n" + frames))
	return Result{Exit: module.ExitFailed, Reason: module.ReasonException, Error: header}
}

// guard runs Go code that may run JavaScript (getters, toJSON) while no
// script is running, and turns whatever it throws into an error.
func (r *run) guard(f func()) (err error) {
	defer func() {
		if x := recover(); x != nil {
			e, ok := x.(error)
			if !ok {
				panic(x)
			}
			err = e
		}
	}()
	if ex := r.vm.Try(f); ex != nil {
		return ex
	}
	return nil
}

// settle records an error from resolving a promise or calling a callback
// from Go; only the first one counts.
func (r *run) settle(err error) {
	if err != nil && r.fatal == nil {
		r.fatal = err
	}
}

// toolCall is one cyrnel.services[s].tools[t].invoke(params).
type toolCall struct {
	serviceID, toolID string
	params            []byte
	resolve, reject   func(any) error
	// errObj is created at the call site, so a failed call's stack points at
	// the line that made it.
	errObj *goja.Object
}

func (r *run) enqueueTool(c *toolCall) {
	r.pending++
	r.toolQueue = append(r.toolQueue, c)
	r.startTools()
}

func (r *run) startTools() {
	for r.inflight < r.opts.MaxConcurrentToolCalls && len(r.toolQueue) > 0 {
		c := r.toolQueue[0]
		r.toolQueue[0] = nil
		r.toolQueue = r.toolQueue[1:]
		r.inflight++
		go r.callTool(c)
	}
}

// callTool runs on its own goroutine and posts the outcome to the loop. JSON
// is decoded and encoded here, off the loop.
func (r *run) callTool(c *toolCall) {
	var params map[string]any
	var result []byte
	err := json.Unmarshal(c.params, &params)
	if err == nil {
		var v any
		if v, err = r.cb.InvokeTool(r.ctx, c.serviceID, c.toolID, params); err == nil {
			if result, err = json.Marshal(v); err != nil {
				err = fmt.Errorf("encoding the result of %s.%s: %w", c.serviceID, c.toolID, err)
			}
		}
	}
	job := func() {
		r.inflight--
		r.pending--
		r.completeTool(c, result, err)
		r.startTools()
	}
	select {
	case r.jobs <- job:
	case <-r.finished:
	}
}

func (r *run) completeTool(c *toolCall, result []byte, err error) {
	if err != nil {
		r.settle(c.errObj.Set("message", err.Error()))
		te := &module.ToolError{Code: module.ToolFailed}
		errors.As(err, &te)
		r.settle(c.errObj.Set("code", string(te.Code)))
		if te.Status != 0 {
			r.settle(c.errObj.Set("status", te.Status))
		}
		if te.Details != nil {
			if b, jerr := json.Marshal(te.Details); jerr == nil {
				if v, perr := r.parse(goja.Undefined(), r.vm.ToValue(string(b))); perr == nil {
					r.settle(c.errObj.Set("details", v))
				}
			}
		}
		r.settle(c.reject(c.errObj))
		return
	}
	v, perr := r.parse(goja.Undefined(), r.vm.ToValue(string(result)))
	if perr != nil {
		r.settle(perr)
		return
	}
	r.settle(c.resolve(v))
}

// timer is one setTimeout. Timers fire in deadline order, ties in creation
// order, one macrotask per loop turn.
type timer struct {
	id    int64
	when  time.Time
	fn    goja.Callable
	args  []goja.Value
	index int
}

type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].when.Equal(h[j].when) {
		return h[i].id < h[j].id
	}
	return h[i].when.Before(h[j].when)
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}

func (r *run) setTimeout(call goja.FunctionCall) goja.Value {
	fn, ok := goja.AssertFunction(call.Argument(0))
	if !ok {
		panic(r.vm.NewTypeError("setTimeout: the callback must be a function"))
	}
	ms := call.Argument(1).ToFloat()
	if math.IsNaN(ms) || ms < 0 {
		ms = 0
	}
	// Browsers clamp delays to 2^31-1 ms too.
	delay := time.Duration(min(ms, math.MaxInt32) * float64(time.Millisecond))
	var args []goja.Value
	if len(call.Arguments) > 2 {
		args = append(args, call.Arguments[2:]...)
	}
	r.lastTimer++
	t := &timer{id: r.lastTimer, when: r.turn.Add(delay), fn: fn, args: args}
	heap.Push(&r.timers, t)
	r.timerByID[t.id] = t
	r.pending++
	r.rearm()
	return r.vm.ToValue(t.id)
}

func (r *run) clearTimeout(call goja.FunctionCall) goja.Value {
	id := call.Argument(0).ToInteger()
	if t, ok := r.timerByID[id]; ok {
		heap.Remove(&r.timers, t.index)
		delete(r.timerByID, id)
		r.pending--
		r.rearm()
	}
	return goja.Undefined()
}

// rearm points the loop's single clock at the earliest timer.
func (r *run) rearm() {
	if len(r.timers) == 0 {
		if r.clock != nil {
			r.clock.Stop()
		}
		return
	}
	d := time.Until(r.timers[0].when)
	if r.clock == nil {
		r.clock = time.NewTimer(d)
		return
	}
	r.clock.Reset(d)
}

func (r *run) fireTimer() {
	if len(r.timers) == 0 || r.timers[0].when.After(time.Now()) {
		r.rearm()
		return
	}
	t := heap.Pop(&r.timers).(*timer)
	delete(r.timerByID, t.id)
	r.pending--
	r.rearm()
	_, err := t.fn(goja.Undefined(), t.args...)
	r.settle(err)
}
