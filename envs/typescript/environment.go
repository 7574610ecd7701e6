package typescript

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
)

// ID is the module id of the TypeScript environment.
const ID = "typescript"

// Version is reported in the module's Info.
const Version = "0.1.0"

// Config is the module configuration (see configSchema).
type Config struct {
	// TimeoutMs applies when the host passes no timeout of its own.
	TimeoutMs int64 `json:"timeoutMs"`
	// MemoryLimitMb is for the worker subprocess that will host the engine;
	// in-process it is accepted but not enforced (goja has no heap limit).
	MemoryLimitMb int64 `json:"memoryLimitMb"`
	// Concurrency bounds the executions running at once; the rest wait,
	// reported as queued.
	Concurrency int `json:"concurrency"`
}

// Configuration defaults and bounds.
const (
	DefaultMemoryLimitMb = 512
	DefaultConcurrency   = 8
	maxConcurrency       = 1024
)

const configSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "timeoutMs": {
      "type": "integer", "minimum": 1, "default": 30000,
      "description": "Execution timeout in milliseconds when the request does not set one."
    },
    "memoryLimitMb": {
      "type": "integer", "minimum": 16, "default": 512,
      "description": "Memory limit per execution in MiB, enforced by the worker subprocess; not enforced when the engine runs in-process."
    },
    "concurrency": {
      "type": "integer", "minimum": 1, "maximum": 1024, "default": 8,
      "description": "Executions running at once; further executions wait as queued."
    }
  }
}`

// Environment is the TypeScript environment module: the engine run
// in-process, one fresh goja runtime per execution.
type Environment struct {
	engine *Engine
	logger *slog.Logger

	mu       sync.Mutex
	bindings module.Bindings
	cfg      Config
	slots    chan struct{} // one token per running execution
	execs    map[int64]*execution
	closed   bool
	inflight sync.WaitGroup
}

type execution struct {
	kill    context.CancelFunc
	running bool
}

var (
	_ module.Environment = (*Environment)(nil)
	_ module.Status      = (*Environment)(nil)
)

// New returns the environment; it runs nothing before Setup. A nil logger
// discards.
func New(logger *slog.Logger, opts Options) *Environment {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Environment{engine: NewEngine(opts), logger: logger, execs: map[int64]*execution{}}
}

// Info describes the module.
func (e *Environment) Info() module.Info {
	return module.Info{
		ID:            ID,
		Type:          module.TypeEnvironment,
		Name:          "TypeScript",
		Version:       Version,
		Description:   "Runs TypeScript in an embedded JavaScript engine (goja); types are stripped by esbuild. Each execution gets a fresh runtime with top-level await, cyrnel.output, cyrnel.services and console.",
		ConfigSchema:  json.RawMessage(configSchema),
		SecretsSchema: json.RawMessage(`{"type":"object","additionalProperties":false}`),
	}
}

// ParseConfig applies defaults to raw and checks it.
func ParseConfig(raw map[string]any) (Config, error) {
	cfg := Config{TimeoutMs: module.DefaultTimeoutMs, MemoryLimitMb: DefaultMemoryLimitMb, Concurrency: DefaultConcurrency}
	if len(raw) > 0 {
		b, err := json.Marshal(raw)
		if err != nil {
			return Config{}, fmt.Errorf("typescript: encoding config: %w", err)
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			return Config{}, fmt.Errorf("typescript: decoding config: %w", err)
		}
	}
	switch {
	case cfg.TimeoutMs < 1:
		return Config{}, fmt.Errorf("typescript: config: timeoutMs must be at least 1, got %d", cfg.TimeoutMs)
	case cfg.MemoryLimitMb < 16:
		return Config{}, fmt.Errorf("typescript: config: memoryLimitMb must be at least 16, got %d", cfg.MemoryLimitMb)
	case cfg.Concurrency < 1 || cfg.Concurrency > maxConcurrency:
		return Config{}, fmt.Errorf("typescript: config: concurrency must be between 1 and %d, got %d", maxConcurrency, cfg.Concurrency)
	}
	return cfg, nil
}

// Setup stores the bindings and the configuration.
func (e *Environment) Setup(_ context.Context, sc module.SetupContext) error {
	if sc.Bindings == nil {
		return errors.New("typescript: setup: no bindings")
	}
	cfg, err := ParseConfig(sc.Config)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return errors.New("typescript: setup: environment is torn down")
	}
	e.bindings, e.cfg = sc.Bindings, cfg
	e.slots = make(chan struct{}, cfg.Concurrency)
	return nil
}

// Execute runs one process: queued until a slot is free, then running until
// the program ends, times out or is killed.
func (e *Environment) Execute(ctx context.Context, in module.ExecutionInput) (module.Result, error) {
	ctx, kill := context.WithCancel(ctx)
	defer kill()
	b, cfg, slots, err := e.register(in.EID, kill)
	if err != nil {
		return module.Result{}, err
	}
	defer e.unregister(in.EID)

	b.SetState(in.EID, module.StateQueued)
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		return module.Result{Exit: module.ExitCanceled, Reason: module.ReasonKilled}, nil
	}
	defer func() { <-slots }()
	e.markRunning(in.EID)
	b.SetState(in.EID, module.StateRunning)

	timeout := time.Duration(cfg.TimeoutMs) * time.Millisecond
	if in.Options.TimeoutMs > 0 {
		timeout = time.Duration(in.Options.TimeoutMs) * time.Millisecond
	}
	res := e.engine.Run(ctx, in.Code, timeout, bindingCallbacks{b: b, eid: in.EID})
	if res.Exit == module.ExitFailed {
		b.SetError(in.EID, res.Error)
	}
	if res.Reason == module.ReasonEnvironmentError {
		e.logger.Error("typescript execution failed in the engine", "eid", in.EID, "error", res.Error)
	}
	return module.Result{Exit: res.Exit, Reason: res.Reason}, nil
}

func (e *Environment) register(eid int64, kill context.CancelFunc) (module.Bindings, Config, chan struct{}, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.closed:
		return nil, Config{}, nil, errors.New("typescript: environment is torn down")
	case e.bindings == nil:
		return nil, Config{}, nil, errors.New("typescript: environment is not set up")
	case e.execs[eid] != nil:
		return nil, Config{}, nil, fmt.Errorf("typescript: execution %d is already in progress", eid)
	}
	e.execs[eid] = &execution{kill: kill}
	e.inflight.Add(1)
	return e.bindings, e.cfg, e.slots, nil
}

func (e *Environment) unregister(eid int64) {
	e.mu.Lock()
	delete(e.execs, eid)
	e.mu.Unlock()
	e.inflight.Done()
}

func (e *Environment) markRunning(eid int64) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x := e.execs[eid]; x != nil {
		x.running = true
	}
}

// Kill stops a queued or running execution; Execute then returns canceled.
// An unknown eid is not an error.
func (e *Environment) Kill(_ context.Context, eid int64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if x := e.execs[eid]; x != nil {
		x.kill()
	}
	return nil
}

// Teardown kills every execution in flight and waits for them to return.
func (e *Environment) Teardown(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	for _, x := range e.execs {
		x.kill()
	}
	e.mu.Unlock()

	done := make(chan struct{})
	go func() {
		e.inflight.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("typescript: teardown: waiting for executions: %w", ctx.Err())
	}
}

// Status reports the environment's load for GET /environment.
func (e *Environment) Status() map[string]any {
	e.mu.Lock()
	defer e.mu.Unlock()
	running := 0
	for _, x := range e.execs {
		if x.running {
			running++
		}
	}
	return map[string]any{
		"mode":                "in-process",
		"concurrency":         e.cfg.Concurrency,
		"running":             running,
		"queued":              len(e.execs) - running,
		"memoryLimitEnforced": false,
	}
}

// bindingCallbacks routes one execution's engine callbacks to the host.
type bindingCallbacks struct {
	b   module.Bindings
	eid int64
}

func (c bindingCallbacks) Stdout(p []byte)             { c.b.EmitStdout(c.eid, p) }
func (c bindingCallbacks) Stderr(p []byte)             { c.b.EmitStderr(c.eid, p) }
func (c bindingCallbacks) Output(patch map[string]any) { c.b.EmitOutput(c.eid, patch) }

func (c bindingCallbacks) InvokeTool(ctx context.Context, serviceID, toolID string, params map[string]any) (any, error) {
	return c.b.InvokeTool(ctx, module.InvokeInput{ServiceID: serviceID, ToolID: toolID, Parameters: params})
}

func (c bindingCallbacks) ListTools(ctx context.Context) ([]module.Tool, error) {
	return c.b.ListTools(ctx)
}
