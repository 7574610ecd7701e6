package typescript

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
)

// Callbacks are how a running program reaches the world outside its runtime.
// Stdout, Stderr and Output are called from the goroutine running the
// program, in program order; InvokeTool and ListTools may be called from
// other goroutines.
type Callbacks interface {
	Stdout(p []byte)
	Stderr(p []byte)
	// Output receives a merge patch from cyrnel.output.
	Output(patch map[string]any)
	InvokeTool(ctx context.Context, serviceID, toolID string, params map[string]any) (any, error)
	ListTools(ctx context.Context) ([]module.Tool, error)
}

// Result is how one run ended.
type Result struct {
	Exit   module.ExitState `json:"exit"`
	Reason module.Reason    `json:"reason"`
	// Error is set when Exit is failed: "Name: message" for an uncaught
	// exception, "SyntaxError: message (main.ts:line:col)" for code that does
	// not compile.
	Error string `json:"error,omitempty"`
	// Abandoned: the program did not stop when interrupted and still holds
	// a goroutine (and its CPU and memory) until a built-in returns; the
	// process hosting it should not run anything else.
	Abandoned bool `json:"abandoned,omitempty"`
}

// Options tune an Engine; zero values take the defaults.
type Options struct {
	// MaxCallStackSize bounds the JavaScript call depth; deeper recursion
	// fails the run with a RangeError instead of growing without limit.
	MaxCallStackSize int
	// MaxConcurrentToolCalls bounds the tool calls one run has in flight;
	// further calls wait in order.
	MaxConcurrentToolCalls int
	// CacheBytes bounds the memory held by compiled programs, reused across
	// runs of the same source.
	CacheBytes int
}

// Defaults for Options.
const (
	DefaultMaxCallStackSize       = 10000
	DefaultMaxConcurrentToolCalls = 16
	DefaultCacheBytes             = 32 << 20
)

// Engine runs TypeScript programs, each in a fresh goja runtime. It is safe
// for concurrent use; runs share only the cache of compiled programs, which
// are immutable.
type Engine struct {
	opts  Options
	cache *programCache
	// spare is a runtime Prepare built for the next run.
	spare atomic.Pointer[run]
}

// NewEngine returns an engine with opts, defaults filled in.
func NewEngine(opts Options) *Engine {
	if opts.MaxCallStackSize <= 0 {
		opts.MaxCallStackSize = DefaultMaxCallStackSize
	}
	if opts.MaxConcurrentToolCalls <= 0 {
		opts.MaxConcurrentToolCalls = DefaultMaxConcurrentToolCalls
	}
	if opts.CacheBytes <= 0 {
		opts.CacheBytes = DefaultCacheBytes
	}
	return &Engine{opts: opts, cache: newProgramCache(opts.CacheBytes)}
}

// Prepare builds the runtime the next Run takes, so that Run starts the
// program without building one (~12 µs): a worker calls it while it waits
// for work. Each runtime still serves one program only.
func (e *Engine) Prepare() {
	if e.spare.Load() != nil {
		return
	}
	r, err := newRun(e.opts)
	if err != nil {
		return // Run builds its own and reports why it cannot
	}
	e.spare.CompareAndSwap(nil, r)
}

// abandonAfter is how long Run waits for an interrupted program to stop.
// goja checks for interrupts between instructions only, so a program inside
// a long built-in (JSON.stringify of a deeply nested object, a catastrophic
// regular expression) or a blocked host call does not stop at once.
const abandonAfter = 250 * time.Millisecond

// Run compiles code (or takes it from the cache) and runs it to the end, at
// most for timeout (0: no clock of its own; only ctx stops it). Cancelling
// ctx kills the run: it ends canceled, never timeout. A failure is also reported on cb.Stderr, with TypeScript positions.
//
// Run returns at most abandonAfter past the timeout or the kill. A program
// that has not stopped by then is abandoned: its goroutine ends on its own
// once the built-in it is in returns, and none of cb is called any more.
// Only a separate process bounds the CPU and memory it uses until then.
func (e *Engine) Run(ctx context.Context, code string, timeout time.Duration, cb Callbacks) Result {
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	c, err := e.compile(code)
	if err != nil {
		return Result{Exit: module.ExitFailed, Reason: module.ReasonEnvironmentError, Error: fmt.Sprintf("typescript: %v", err)}
	}
	if c.syntaxErr != nil {
		cb.Stderr([]byte(c.syntaxErr.report()))
		return Result{Exit: module.ExitFailed, Reason: module.ReasonException, Error: c.syntaxErr.Error()}
	}
	if ctx.Err() != nil {
		return Result{Exit: module.ExitCanceled, Reason: module.ReasonKilled}
	}
	r := e.spare.Swap(nil)
	if r == nil {
		if r, err = newRun(e.opts); err != nil {
			return Result{Exit: module.ExitFailed, Reason: module.ReasonEnvironmentError, Error: fmt.Sprintf("typescript: %v", err)}
		}
	}
	g := &gate{Callbacks: cb}
	r.begin(ctx, c, g)
	done := make(chan Result, 1)
	go func() { done <- r.execute(deadline) }()
	select {
	case res := <-done:
		return res
	case <-r.stopped:
	}
	grace := time.NewTimer(abandonAfter)
	defer grace.Stop()
	select {
	case res := <-done:
		return res
	case <-grace.C:
	}
	g.Stderr([]byte(fmt.Sprintf("The program did not stop within %v of being interrupted (it is inside a built-in function or a host call); it was abandoned.\n", abandonAfter)))
	g.closed.Store(true)
	res := r.stoppedResult()
	res.Abandoned = true
	return res
}

// gate stops a run's callbacks once Run has abandoned it: no callback starts
// after Run returns.
type gate struct {
	Callbacks
	closed atomic.Bool
}

var errAbandoned = errors.New("the run was abandoned")

func (g *gate) Stdout(p []byte) {
	if !g.closed.Load() {
		g.Callbacks.Stdout(p)
	}
}

func (g *gate) Stderr(p []byte) {
	if !g.closed.Load() {
		g.Callbacks.Stderr(p)
	}
}

func (g *gate) Output(patch map[string]any) {
	if !g.closed.Load() {
		g.Callbacks.Output(patch)
	}
}

func (g *gate) InvokeTool(ctx context.Context, serviceID, toolID string, params map[string]any) (any, error) {
	if g.closed.Load() {
		return nil, errAbandoned
	}
	return g.Callbacks.InvokeTool(ctx, serviceID, toolID, params)
}

func (g *gate) ListTools(ctx context.Context) ([]module.Tool, error) {
	if g.closed.Load() {
		return nil, errAbandoned
	}
	return g.Callbacks.ListTools(ctx)
}

func (e *Engine) compile(code string) (*compiled, error) {
	key := sha256.Sum256([]byte(code))
	if c, ok := e.cache.get(key); ok {
		return c, nil
	}
	c, err := compileSource(code)
	if err != nil {
		return nil, err
	}
	e.cache.add(key, c)
	return c, nil
}
