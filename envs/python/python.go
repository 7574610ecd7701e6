// Package python is the Python environment: a pool of warm CPython
// interpreters, each running the cyrnel runtime and serving one execution.
package python

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/envs/sandbox"
	"github.com/cyrnel/cyrnel/envs/worker"
	pyruntime "github.com/cyrnel/cyrnel/python"
)

// Version is the environment module's version.
const Version = "0.1.0"

// boot is the interpreter's entry: put the runtime on sys.path, then serve.
const boot = "import sys; sys.path[:0] = sys.argv[1].split('\\n'); from cyrnel._worker import main; main(sys.argv[2:])"

// Env is the Python environment module.
type Env struct {
	log *slog.Logger

	mu       sync.Mutex
	cfg      Config
	b        module.Bindings
	python   string // real interpreter path
	version  string
	paths    []string // sys.path prefix: the runtime, then site-packages
	runtime  string   // extracted runtime directory
	launch   worker.Launcher
	layers   map[string]any // the sandbox in force, for Status
	pool     *worker.Pool
	slots    chan struct{}
	waiting  int
	flights  map[int64]context.CancelFunc
	inflight sync.WaitGroup
	reaping  sync.WaitGroup
	closed   bool
}

// New returns the Python environment.
func New(log *slog.Logger) *Env {
	return &Env{log: log.With("env", "python"), flights: map[int64]context.CancelFunc{}}
}

// Info describes the module.
func (e *Env) Info() module.Info {
	return module.Info{
		ID: "python", Type: module.TypeEnvironment, Name: "Python", Version: Version,
		Description:   "CPython interpreters from a warm pool, a fresh one per execution; tools are Python functions.",
		ConfigSchema:  json.RawMessage(configSchema),
		SecretsSchema: json.RawMessage(`{"type":"object","additionalProperties":false}`),
	}
}

// Setup resolves the interpreter, extracts the runtime and fills the pool.
func (e *Env) Setup(ctx context.Context, sc module.SetupContext) error {
	cfg, err := parseConfig(sc.Config)
	if err != nil {
		return err
	}
	py, err := probeInterpreter(ctx, cfg.Interpreter)
	if err != nil {
		return err
	}
	launcher, layers, err := e.launcher(cfg, py)
	if err != nil {
		return err
	}
	dir, err := extractRuntime()
	if err != nil {
		return err
	}
	paths := []string{dir}
	if cfg.SitePackages {
		paths = append(paths, py.site...)
	}
	if s, ok := launcher.(worker.Sandboxed); ok {
		s.ReadPaths = append(s.ReadPaths, dir)
		launcher = s
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cfg, e.b, e.python, e.version, e.paths, e.runtime, e.launch, e.layers = cfg, sc.Bindings, py.exe, py.version, paths, dir, launcher, layers
	e.slots = make(chan struct{}, cfg.Concurrency)
	e.pool = worker.NewPool(e.log, cfg.PoolSize, time.Duration(cfg.StartTimeoutMs)*time.Millisecond, e.spawn)
	e.log.Info("python environment ready", "interpreter", py.exe, "poolSize", cfg.PoolSize, "preload", cfg.Preload, "sandbox", layers)
	return nil
}

// launcher picks how interpreters start: in the sandbox with the layers the
// config asks for, refusing when the machine lacks one of them; or, only
// when the config says so, as plain processes.
func (e *Env) launcher(cfg Config, py interpreter) (worker.Launcher, map[string]any, error) {
	if !cfg.Sandbox.Enabled {
		e.log.Warn("the python sandbox is disabled by config: programs run as plain processes with the host's privileges")
		return worker.Plain{}, map[string]any{"enabled": false}, nil
	}
	support := sandbox.Probe()
	relax := cfg.Sandbox.relax()
	if err := support.Check(relax); err != nil {
		return nil, nil, fmt.Errorf("refusing to run python without its sandbox: %w (turn the missing layers off in the python module's sandbox config to run anyway)", err)
	}
	layers := support.Layers(relax)
	return worker.Sandboxed{ReadPaths: py.readPaths(), Limits: cfg.Limits.sandbox(), Relax: relax, Log: e.log},
		map[string]any{"enabled": true, "layers": layers, "limits": cfg.Limits}, nil
}

// interpreter is what the probe learnt of a Python installation.
type interpreter struct {
	exe      string   // the real executable
	site     []string // site-packages directories that exist
	prefixes []string // sys.prefix, base_prefix, exec_prefix: the standard library
	version  string
}

// readPaths is what the sandbox must let the interpreter read.
func (p interpreter) readPaths() []string {
	paths := append(append([]string{}, p.prefixes...), p.site...)
	if real, err := filepath.EvalSymlinks(p.exe); err == nil {
		paths = append(paths, filepath.Dir(real))
	}
	return paths
}

// probeInterpreter resolves the real executable behind name (python3 on PATH
// may be a shim script costing 60-100 ms per start), its site-packages and
// its prefixes.
func probeInterpreter(ctx context.Context, name string) (interpreter, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return interpreter{}, fmt.Errorf("python interpreter %q: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "-I", "-c",
		"import json, site, sys, platform; print(json.dumps({'exe': sys.executable, 'site': site.getsitepackages(), "+
			"'prefixes': sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}), 'version': platform.python_version()}))").Output()
	if err != nil {
		return interpreter{}, fmt.Errorf("probe python interpreter %s: %w", path, err)
	}
	var p struct {
		Exe      string   `json:"exe"`
		Site     []string `json:"site"`
		Prefixes []string `json:"prefixes"`
		Version  string   `json:"version"`
	}
	if err := json.Unmarshal(out, &p); err != nil || !filepath.IsAbs(p.Exe) {
		return interpreter{}, fmt.Errorf("probe python interpreter %s: unexpected answer %q", path, out)
	}
	py := interpreter{exe: p.Exe, version: p.Version}
	for _, d := range p.Site {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			py.site = append(py.site, d)
		}
	}
	for _, d := range p.Prefixes {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			py.prefixes = append(py.prefixes, d)
		}
	}
	return py, nil
}

// extractRuntime writes the embedded cyrnel package to a fresh directory.
func extractRuntime() (string, error) {
	dir, err := os.MkdirTemp("", "cyrnel-runtime-")
	if err != nil {
		return "", fmt.Errorf("extract python runtime: %w", err)
	}
	err = fs.WalkDir(pyruntime.Runtime, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, path)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := pyruntime.Runtime.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("extract python runtime: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", fmt.Errorf("extract python runtime: %w", err)
	}
	return dir, nil
}

func (e *Env) spawn(ctx context.Context) (*worker.Worker, error) {
	e.mu.Lock()
	python, paths, preload, launcher := e.python, e.paths, e.cfg.Preload, e.launch
	e.mu.Unlock()
	args := append([]string{"-I", "-S", "-c", boot, strings.Join(paths, "\n")}, preload...)
	w, err := worker.Start(ctx, e.log, launcher, worker.Command{Path: python, Args: args})
	if err != nil {
		return nil, err
	}
	if err := w.WaitReady(ctx); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// ErrQueueFull is returned when more executions wait than QueueLimit allows.
var ErrQueueFull = errors.New("python execution queue is full")

// ErrTornDown is returned for executions after Teardown.
var ErrTornDown = errors.New("python environment is torn down")

// Execute runs one program in a fresh interpreter.
func (e *Env) Execute(ctx context.Context, in module.ExecutionInput) (module.Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	e.mu.Lock()
	if e.closed || e.pool == nil {
		e.mu.Unlock()
		return module.Result{}, ErrTornDown
	}
	if e.waiting >= e.cfg.QueueLimit+e.cfg.Concurrency {
		e.mu.Unlock()
		return module.Result{}, fmt.Errorf("%w (%d waiting)", ErrQueueFull, e.cfg.QueueLimit)
	}
	e.waiting++
	e.flights[in.EID] = cancel
	e.inflight.Add(1)
	b, pool, slots := e.b, e.pool, e.slots
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.flights, in.EID)
		e.mu.Unlock()
		e.inflight.Done()
	}()

	b.SetState(in.EID, module.StateQueued)
	canceled := module.Result{Exit: module.ExitCanceled, Reason: module.ReasonKilled}
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		e.release(false)
		return canceled, nil
	}
	defer e.release(true)
	w, err := pool.Get(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return canceled, nil
		}
		return module.Result{}, fmt.Errorf("get a python interpreter: %w", err)
	}
	res := w.Run(ctx, b, worker.Request{Input: in, OutputLimit: in.Options.OutputLimitBytes})
	// Reaping the spent interpreter is off the critical path; Teardown
	// waits for it.
	e.reaping.Add(1)
	go func() {
		defer e.reaping.Done()
		w.Close()
	}()
	return res, nil
}

func (e *Env) release(slot bool) {
	if slot {
		<-e.slots
	}
	e.mu.Lock()
	e.waiting--
	e.mu.Unlock()
}

// Kill stops a queued or running execution; unknown eids are ignored.
func (e *Env) Kill(_ context.Context, eid int64) error {
	e.mu.Lock()
	cancel := e.flights[eid]
	e.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return nil
}

// Status reports the pool's health for GET /environment.
func (e *Env) Status() map[string]any {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := map[string]any{"interpreter": e.python, "running": len(e.flights), "concurrency": e.cfg.Concurrency, "sandbox": e.layers}
	if e.pool != nil {
		st["pool"] = e.pool.Stats()
	}
	return st
}

// Teardown kills what is still running, empties the pool and removes the
// extracted runtime.
func (e *Env) Teardown(context.Context) error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	for _, cancel := range e.flights {
		cancel()
	}
	pool, dir := e.pool, e.runtime
	e.mu.Unlock()
	e.inflight.Wait()
	e.reaping.Wait()
	if pool != nil {
		pool.Close()
	}
	if dir != "" {
		return os.RemoveAll(dir)
	}
	return nil
}
