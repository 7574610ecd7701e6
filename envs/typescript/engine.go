package typescript

import (
	"context"
	"crypto/sha256"
	"fmt"
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

// Run compiles code (or takes it from the cache) and runs it to the end, at
// most for timeout. Cancelling ctx kills the run: it ends canceled, never
// timeout. A failure is also reported on cb.Stderr, with TypeScript positions.
func (e *Engine) Run(ctx context.Context, code string, timeout time.Duration, cb Callbacks) Result {
	deadline := time.Now().Add(timeout)
	c, err := e.compile(code)
	if err != nil {
		return Result{Exit: module.ExitFailed, Reason: module.ReasonEnvironmentError, Error: fmt.Sprintf("typescript: %v", err)}
	}
	if c.syntaxErr != nil {
		cb.Stderr([]byte(c.syntaxErr.report()))
		return Result{Exit: module.ExitFailed, Reason: module.ReasonException, Error: c.syntaxErr.Error()}
	}
	return newRun(ctx, e.opts, c, cb).execute(time.Until(deadline))
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
