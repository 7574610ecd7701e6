package typescript

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/envs/worker"
)

// ID is the module id of the TypeScript environment.
const ID = "typescript"

// Version is reported in the module's Info.
const Version = "0.1.0"

// Config is the module configuration (see configSchema).
type Config struct {
	// TimeoutMs applies when the host passes no timeout of its own.
	TimeoutMs int64 `json:"timeoutMs"`
	// Concurrency bounds the executions running at once (one per worker);
	// the rest wait, reported as queued.
	Concurrency int `json:"concurrency"`
	// PoolSize is how many warm workers wait for work.
	PoolSize int                  `json:"poolSize"`
	Sandbox  module.SandboxConfig `json:"sandbox"`
	// Limits hold each worker process: a memory bomb or a runaway built-in
	// ends that worker, never the host.
	Limits module.LimitsConfig `json:"limits"`
}

// Configuration defaults.
const (
	DefaultConcurrency = 8
	DefaultPoolSize    = 2
)

// grace is how long a worker gets to stop a program by itself (the engine
// abandons a run within 250 ms of its timeout or cancel) before its process
// is killed and replaced.
const grace = 500 * time.Millisecond

const configSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "timeoutMs": {
      "type": "integer", "minimum": 1, "maximum": 86400000, "default": 30000,
      "description": "Execution timeout in milliseconds when the host passes none."
    },
    "concurrency": {
      "type": "integer", "minimum": 1, "maximum": 256, "default": 8,
      "description": "Executions running at once; further executions wait as queued."
    },
    "poolSize": {
      "type": "integer", "minimum": 1, "maximum": 64, "default": 2,
      "description": "Warm worker processes kept ready."
    },
    ` + worker.SandboxSchema + `
  }
}`

// Environment is the TypeScript environment module. Programs run in the
// engine inside sandboxed worker processes (this binary in worker mode),
// a fresh goja runtime per execution; a worker serves executions one at a
// time and is replaced when one ends uncleanly.
type Environment struct {
	logger *slog.Logger

	mu     sync.Mutex
	b      module.Bindings
	cfg    Config
	layers map[string]any
	runner *worker.Runner
	closed bool
}

var (
	_ module.Environment = (*Environment)(nil)
	_ module.Status      = (*Environment)(nil)
)

// New returns the environment; it runs nothing before Setup. A nil logger
// discards.
func New(logger *slog.Logger) *Environment {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Environment{logger: logger.With("env", ID)}
}

// Info describes the module.
func (e *Environment) Info() module.Info {
	return module.Info{
		ID:            ID,
		Type:          module.TypeEnvironment,
		Name:          "TypeScript",
		Version:       Version,
		Description:   "Runs TypeScript in an embedded JavaScript engine (goja) inside sandboxed worker processes; types are stripped by esbuild. Each execution gets a fresh runtime with top-level await, cyrnel.output, cyrnel.services and console.",
		ConfigSchema:  json.RawMessage(configSchema),
		SecretsSchema: json.RawMessage(`{"type":"object","additionalProperties":false}`),
	}
}

// ParseConfig applies defaults to raw and checks it.
func ParseConfig(raw map[string]any) (Config, error) {
	cfg := Config{
		TimeoutMs: module.DefaultTimeoutMs, Concurrency: DefaultConcurrency, PoolSize: DefaultPoolSize,
		Sandbox: module.DefaultSandbox, Limits: module.DefaultLimits,
	}
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
	case cfg.Concurrency < 1 || cfg.Concurrency > 256:
		return Config{}, fmt.Errorf("typescript: config: concurrency must be between 1 and 256, got %d", cfg.Concurrency)
	case cfg.PoolSize < 1 || cfg.PoolSize > 64:
		return Config{}, fmt.Errorf("typescript: config: poolSize must be between 1 and 64, got %d", cfg.PoolSize)
	case cfg.Limits.MemoryMB < 16:
		return Config{}, fmt.Errorf("typescript: config: limits.memoryMb must be at least 16, got %d", cfg.Limits.MemoryMB)
	}
	return cfg, nil
}

// Setup checks the config and the sandbox and starts the worker pool.
func (e *Environment) Setup(ctx context.Context, sc module.SetupContext) error {
	if sc.Bindings == nil {
		return errors.New("typescript: setup: no bindings")
	}
	cfg, err := ParseConfig(sc.Config)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("typescript: find this binary to start workers: %w", err)
	}
	if self, err = filepath.EvalSymlinks(self); err != nil {
		return fmt.Errorf("typescript: find this binary to start workers: %w", err)
	}
	launcher, layers, err := worker.ChooseLauncher(e.logger, cfg.Sandbox, cfg.Limits, nil)
	if err != nil {
		return fmt.Errorf("typescript: %w", err)
	}
	// The Go runtime's fatal errors when an allocation fails, as under the
	// rlimit fallback (a memory cgroup kills the worker instead); programs
	// cannot write to the worker's stderr.
	cmd := worker.Command{Path: self, Args: []string{WorkerArg}, Env: workerEnv(cfg.Limits), OutOfMemory: []string{
		"fatal error: out of memory", "fatal error: runtime: out of memory", "fatal error: pageAlloc: out of memory",
		"fatal error: runtime: cannot allocate memory",
	}, FollowHost: true}
	spawn := func(ctx context.Context) (*worker.Worker, error) {
		w, err := worker.Start(ctx, e.logger, launcher, cmd)
		if err != nil {
			return nil, err
		}
		if err := w.WaitReady(ctx); err != nil {
			w.Close()
			return nil, err
		}
		return w, nil
	}
	r := worker.NewRunner(e.logger, worker.RunnerConfig{
		PoolSize: cfg.PoolSize, Concurrency: cfg.Concurrency, QueueLimit: 256,
		StartTimeout: 10 * time.Second, Reuse: true, Grace: grace,
	}, spawn)
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return errors.New("typescript: setup: environment is torn down")
	}
	e.b, e.cfg, e.layers, e.runner = sc.Bindings, cfg, layers, r
	e.mu.Unlock()
	// Set up means a worker is warm: a configuration whose workers cannot
	// start is refused here. Teardown stops the runner either way.
	if err := r.Start(ctx); err != nil {
		return fmt.Errorf("typescript: %w", err)
	}
	return nil
}

// workerEnv is the Go runtime's settings for a worker under limits. Each
// execution builds a runtime of its own, so a worker allocates much and
// keeps little: with Go's default GOGC=100 its collector took a sixth of
// its CPU. GOGC=400 collects a quarter as often (about 10 MiB more resident
// per worker); GOMEMLIMIT, below the worker's memory limit, makes the
// collector work harder as a program's heap nears it instead of letting the
// larger target run into the limit (docs/typescript.md).
func workerEnv(l module.LimitsConfig) []string {
	return []string{"GOGC=400", fmt.Sprintf("GOMEMLIMIT=%dMiB", l.MemoryMB*7/8)}
}

// Execute runs one process: queued until a slot and a worker are free, then
// running until the program ends, times out or is killed.
func (e *Environment) Execute(ctx context.Context, in module.ExecutionInput) (module.Result, error) {
	e.mu.Lock()
	r, b, cfg := e.runner, e.b, e.cfg
	e.mu.Unlock()
	if in.Options.TimeoutMs <= 0 {
		in.Options.TimeoutMs = cfg.TimeoutMs
	}
	return r.Execute(ctx, b, in)
}

// Kill stops a queued or running execution; Execute then returns canceled.
// An unknown eid is not an error.
func (e *Environment) Kill(_ context.Context, eid int64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runner.Kill(eid)
	return nil
}

// Teardown kills every execution in flight, waits for them, and stops the
// workers.
func (e *Environment) Teardown(ctx context.Context) error {
	e.mu.Lock()
	e.closed = true
	r := e.runner
	e.runner = nil
	e.mu.Unlock()
	return r.Stop(ctx)
}

// Workers counts the pool's workers.
func (e *Environment) Workers() module.WorkerCounts {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runner.Counts()
}

// Status reports the environment's load and sandbox for GET /environment.
func (e *Environment) Status() map[string]any {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := map[string]any{"mode": "worker", "sandbox": e.layers}
	maps.Copy(st, e.runner.Status())
	return st
}
