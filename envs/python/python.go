// Package python is the Python environment: pools of warm CPython
// interpreters, each running the cyrnel runtime and serving one execution
// (where asyncio is preloaded, a second pool without it serves the programs
// that do not await).
package python

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/envs/worker"
	pyruntime "github.com/cyrnel/cyrnel/python"
)

// Version is the environment module's version.
const Version = "0.1.0"

// templateBoot is the template's entry: the runtime on sys.path, then fork
// an interpreter per execution (python/cyrnel/_template.py).
const templateBoot = "import sys; sys.path[:0] = sys.argv[1].split('\\n'); from cyrnel._template import main; sys.exit(main(sys.argv[2:]))"

// boot is the interpreter's entry: put the runtime on sys.path, then serve.
const boot = "import sys; sys.path[:0] = sys.argv[1].split('\\n'); from cyrnel._worker import main; main(sys.argv[2:])"

// Env is the Python environment module.
type Env struct {
	log          *slog.Logger
	interpreters []Interpreter // declared by the operator; the first is the default

	mu            sync.Mutex
	cfg           Config
	b             module.Bindings
	python        string // real interpreter path
	version       string
	packages      []Package      // importable from sys.path besides the standard library
	build         map[string]any // the declared packages' environment, for Status (nil: none)
	buildSeq      uint64         // when it was asked for, among builds
	pkgs          PackageSource
	builds        *Builds
	paths         []string        // sys.path prefix: the runtime, then site-packages
	runtime       string          // extracted runtime directory
	launch        worker.Launcher // interpreters with the whole preload
	forking       *worker.Forking // their template; nil when interpreters are spawned
	sessionLaunch worker.Launcher // sessions' interpreters: forked as session children, or spawned
	// Where asyncio is preloaded, the programs that never say async or
	// await run in interpreters without it: lean is their preload (nil:
	// every program's interpreter imports all of the preload), forked from
	// leanForking, or spawned by launch where interpreters are spawned.
	lean        []string
	leanForking *worker.Forking
	layers      map[string]any // the sandbox in force, for Status
	tplWhy      string         // why interpreters are not forked from a template
	runner      *worker.Runner
}

// Options are the host's settings for the environment.
type Options struct {
	// Interpreters are the Pythons a config may name (serve --python),
	// from Declare; the first runs when a config names none.
	Interpreters []Interpreter
	// Packages is where declared packages come from (serve --package-index,
	// --package-host, --find-links) and where their environments are cached.
	Packages PackageSource
	// Builds is shared by the environments of one host, so that a build is
	// made once and the active environment's Status shows one that runs for
	// a set-up; nil: the environment's own.
	Builds *Builds
}

// New returns the Python environment.
func New(log *slog.Logger, opts Options) *Env {
	builds := opts.Builds
	if builds == nil {
		builds = NewBuilds()
	}
	return &Env{log: log.With("env", "python"), interpreters: opts.Interpreters, pkgs: opts.Packages, builds: builds}
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

// Setup checks that the config names a declared interpreter, probes it in
// the sandbox, extracts and compiles the runtime and fills the pools.
func (e *Env) Setup(ctx context.Context, sc module.SetupContext) error {
	cfg, err := parseConfig(sc.Config)
	if err != nil {
		return err
	}
	// Before anything touches it: a config may name only what the
	// operator declared.
	declared, err := choose(e.interpreters, cfg.Interpreter)
	if err != nil {
		return err
	}
	dir, sources, err := extractRuntime()
	if err != nil {
		return err
	}
	// The probe runs in the sandbox the config asks for, as programs do,
	// reading only where the interpreter is installed (and the runtime);
	// programs then read what it reported.
	launcher, layers, err := worker.ChooseLauncher(e.log, cfg.Sandbox, cfg.Limits, append(declared.probeReadPaths(), dir))
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	py, err := probeInterpreter(ctx, launcher, declared, dir, sources)
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	paths, packages, build, seq, err := e.sysPath(ctx, cfg, py, dir)
	if err != nil {
		os.RemoveAll(dir)
		return err
	}
	readPaths := paths // the runtime and the declared packages' site are not the interpreter's
	if s, ok := launcher.(worker.Sandboxed); ok {
		s.ReadPaths = append(py.readPaths(), readPaths...)
		launcher = s
	}
	sessionLaunch := launcher
	lean := leanPreload(cfg.Preload)
	var forking, leanForking *worker.Forking
	tplWhy := "turned off by config (fork: false)"
	if cfg.Fork {
		templateFor := func(kind string, preload []string) (*worker.Forking, string) {
			argv := append([]string{py.exe, "-I", "-S", "-c", templateBoot, strings.Join(paths, "\n")}, preload...)
			return worker.ChooseForking(e.log.With("template", kind), cfg.Sandbox, cfg.Limits, append(py.readPaths(), readPaths...), argv, dataScienceEnv, cfg.PoolSize+spareKeepers)
		}
		if forking, tplWhy = templateFor("whole preload", cfg.Preload); forking != nil {
			launcher, sessionLaunch = forking, forking.Sessions()
			if lean != nil {
				// Chosen as the first was: the same sandbox and machine.
				leanForking, _ = templateFor("without asyncio", lean)
			}
		}
	}
	rc := worker.RunnerConfig{
		PoolSize: cfg.PoolSize, Concurrency: cfg.Concurrency, QueueLimit: cfg.QueueLimit,
		StartTimeout:   time.Duration(cfg.StartTimeoutMs) * time.Millisecond,
		Stubs:          stubs{},
		RefillAfterRun: forking != nil,
	}
	spawn := e.spawn
	if lean != nil {
		spawn = e.spawnLean
		rc.Variant = &worker.Variant{Name: "asyncio", Spawn: e.spawn, Takes: awaits}
	}
	r := worker.NewRunner(e.log, rc, spawn)
	e.mu.Lock()
	e.cfg, e.b, e.python, e.version, e.paths, e.runtime, e.launch, e.layers, e.runner = cfg, sc.Bindings, py.exe, py.version, paths, dir, launcher, layers, r
	e.forking, e.tplWhy, e.sessionLaunch, e.packages, e.build, e.buildSeq = forking, tplWhy, sessionLaunch, packages, build, seq
	e.lean, e.leanForking = lean, leanForking
	e.mu.Unlock()
	// Set up means an interpreter of each kind is warm, its preload
	// imported inside the sandbox: a config that cannot work is refused
	// here, naming the module, instead of failing every execution.
	// Teardown cleans up.
	if err := r.Start(ctx); err != nil {
		if field, why, ok := preloadError(err, cfg.Preload); ok {
			return &module.ConfigError{Field: field, Err: why}
		}
		return err
	}
	e.log.Info("python environment ready", "interpreter", py.exe, "poolSize", cfg.PoolSize, "preload", cfg.Preload, "withoutAsyncio", lean != nil, "sandbox", layers)
	return nil
}

// sysPath is the interpreter's sys.path after the runtime (dir) and what
// can be imported from it: the declared packages' environment (built or
// found in the cache) and, with systemSitePackages, the interpreter's own
// site-packages; without declared packages, its site-packages as
// sitePackages says. seq places the build among this host's.
func (e *Env) sysPath(ctx context.Context, cfg Config, py interpreter, dir string) (paths []string, packages []Package, build map[string]any, seq uint64, err error) {
	paths, packages = []string{dir}, []Package{}
	if len(cfg.Packages) == 0 {
		if cfg.SitePackages {
			paths, packages = append(paths, py.site...), py.packages
		}
		return paths, packages, nil, e.builds.next(), nil
	}
	if e.pkgs.CacheDir == "" {
		return nil, nil, nil, 0, &module.ConfigError{Field: "packages", Err: errors.New("this host has no package cache directory")}
	}
	req := buildRequest{exe: py.exe, version: py.version, site: py.site, packages: cfg.Packages, system: cfg.SystemSitePackages}
	if cfg.SystemSitePackages {
		req.base = py.packages
	}
	start := time.Now()
	b, seq, err := e.builds.build(ctx, e.log, e.pkgs, req)
	if err != nil {
		return nil, nil, nil, 0, err
	}
	// In use: the collector keeps what was used recently.
	now := time.Now()
	_ = os.Chtimes(filepath.Dir(b.Site), now, now)
	if err := collectBuilds(e.pkgs.CacheDir, map[string]bool{b.Hash: true}, packageGrace); err != nil {
		e.log.Warn("collect unused package environments", "err", err)
	}
	e.log.Info("python packages ready", "hash", b.Hash, "packages", b.Packages, "ms", time.Since(start).Milliseconds())
	paths, packages = append(paths, b.Site), append(packages, b.Packages...)
	if cfg.SystemSitePackages {
		paths, packages = append(paths, py.site...), append(packages, py.packages...)
	}
	return paths, firstOfEach(packages), map[string]any{"state": "ready", "hash": b.Hash}, seq, nil
}

// firstOfEach keeps the first package of each name: the one imported.
func firstOfEach(ps []Package) []Package {
	seen := map[string]bool{}
	return slices.DeleteFunc(ps, func(p Package) bool {
		n := normalize(p.Name)
		dup := seen[n]
		seen[n] = true
		return dup
	})
}

// packageGrace is how long an environment nothing uses stays cached: a
// configuration switched back to within it finds its environment built.
const packageGrace = 7 * 24 * time.Hour

// preloadFailed finds the line the runtime writes when a preload module
// cannot be imported (before it is ready, so before any program runs):
// the module's name and the error.
var preloadFailed = regexp.MustCompile(`cyrnel: preload\[\d+\] (\S+): ([^\n]*)`)

// preloadError reads a start's error for the preload module that failed,
// and names it by its place in the config (an interpreter without asyncio
// numbers its own preload otherwise).
func preloadError(err error, preload []string) (field string, why error, ok bool) {
	m := preloadFailed.FindStringSubmatch(err.Error())
	if m == nil {
		return "", nil, false
	}
	field = "preload"
	if i := slices.Index(preload, m[1]); i >= 0 {
		field = fmt.Sprintf("preload[%d]", i)
	}
	return field, fmt.Errorf("cannot import %s in the sandbox: %s", m[1], m[2]), true
}

// leanPreload is the preload of the interpreters for programs that never
// await, where asyncio is preloaded: the rest of it. asyncio holds 40 % of
// a default template's memory, which every fork copies the page tables of
// and every exit frees (docs/decisions.md, "asyncio where it is awaited").
// nil: there is no lean preload to keep apart.
func leanPreload(preload []string) []string {
	isAsyncio := func(m string) bool { return m == "asyncio" || strings.HasPrefix(m, "asyncio.") }
	if !slices.ContainsFunc(preload, isAsyncio) {
		return nil
	}
	return slices.DeleteFunc(slices.Clone(preload), isAsyncio)
}

// awaits says whether a program may need asyncio: its code or a Python
// file placed beside it says async or await somewhere (in code, a comment
// or a string). A program that reaches asyncio otherwise (a module it
// imports, text it compiles) runs all the same and imports it itself.
func awaits(in module.ExecutionInput) bool {
	if strings.Contains(in.Code, "async") || strings.Contains(in.Code, "await") {
		return true
	}
	return slices.ContainsFunc(in.Files, func(f module.File) bool {
		return strings.HasSuffix(f.Path, ".py") && (bytes.Contains(f.Content, []byte("async")) || bytes.Contains(f.Content, []byte("await")))
	})
}

// interpreter is what the probe learnt of a Python installation.
type interpreter struct {
	exe      string   // the real executable
	site     []string // site-packages directories that exist
	prefixes []string // sys.prefix, base_prefix, exec_prefix: the standard library
	version  string
	packages []Package // the distributions installed in site
}

// Package is an installed distribution, as the sandboxed probe read its
// metadata.
type Package struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// readPaths is what the sandbox must let the interpreter read.
func (p interpreter) readPaths() []string {
	paths := append(append([]string{}, p.prefixes...), p.site...)
	for _, d := range dataSciencePaths {
		if _, err := os.Stat(d); err == nil {
			paths = append(paths, d)
		}
	}
	if real, err := filepath.EvalSymlinks(p.exe); err == nil {
		paths = append(paths, filepath.Dir(real))
	}
	// Debian links shared libraries through the alternatives system (numpy's
	// libblas.so.3 → /etc/alternatives/…): only symlinks into /usr.
	if _, err := os.Stat("/etc/alternatives"); err == nil {
		paths = append(paths, "/etc/alternatives")
	}
	return paths
}

// spareKeepers: the keepers a forking template makes before its first
// program beyond one per warm slot. One client back to back needs one for
// the execution under way and a few whose program has ended and which
// are still cleaning up; more clients get theirs as they come.
const spareKeepers = 4

// extractRuntime writes the embedded cyrnel package to a fresh directory;
// it returns the directory and its Python source files (relative paths).
func extractRuntime() (string, map[string]bool, error) {
	dir, err := os.MkdirTemp("", "cyrnel-runtime-")
	if err != nil {
		return "", nil, fmt.Errorf("extract python runtime: %w", err)
	}
	sources := map[string]bool{}
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
		if strings.HasSuffix(path, ".py") {
			sources[filepath.FromSlash(path)] = true
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("extract python runtime: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("extract python runtime: %w", err)
	}
	return dir, sources, nil
}

// spawn starts an interpreter with the whole preload; spawnLean one
// without asyncio, for a program that does not await.
func (e *Env) spawn(ctx context.Context) (*worker.Worker, error) {
	e.mu.Lock()
	launcher, preload := e.launch, e.cfg.Preload
	e.mu.Unlock()
	return e.start(ctx, launcher, false, preload)
}

func (e *Env) spawnLean(ctx context.Context) (*worker.Worker, error) {
	e.mu.Lock()
	launcher := e.launch
	if e.leanForking != nil {
		launcher = e.leanForking
	}
	preload := e.lean
	e.mu.Unlock()
	return e.start(ctx, launcher, false, preload)
}

// sessionArg makes a started interpreter serve a session
// (python/cyrnel/_worker.py SESSION_ARG); a forked one learns it from its
// fork request.
const sessionArg = "--session"

// sessionGrace is how long a session's program gets to stop after a kill
// (KeyboardInterrupt) before its interpreter is killed and the session ends.
const sessionGrace = 2 * time.Second

// StartSession starts an interpreter of its own, outside the pools, that
// keeps its globals between executions and survives an interrupted program:
// forked as a session's child of the template with the whole preload (a
// later program of the session may await) where interpreters are forked,
// else spawned.
func (e *Env) StartSession(ctx context.Context) (module.Session, error) {
	e.mu.Lock()
	launcher, preload := e.sessionLaunch, e.cfg.Preload
	e.mu.Unlock()
	w, err := e.start(ctx, launcher, true, preload)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	b := e.b
	e.mu.Unlock()
	return worker.NewSession(w, b, stubs{}, sessionGrace), nil
}

// start starts an interpreter that imports preload while warm (a forking
// launcher ignores the command: its template's is used).
func (e *Env) start(ctx context.Context, launcher worker.Launcher, session bool, preload []string) (*worker.Worker, error) {
	e.mu.Lock()
	python, paths := e.python, e.paths
	e.mu.Unlock()
	args := []string{"-I", "-S", "-c", boot, strings.Join(paths, "\n")}
	if session {
		args = append(args, sessionArg)
	}
	args = append(args, preload...)
	w, err := worker.Start(ctx, e.log, launcher, worker.Command{Path: python, Args: args, Env: slices.Clone(dataScienceEnv)})
	if err != nil {
		return nil, err
	}
	if err := w.WaitReady(ctx); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// dataScienceEnv lets matplotlib work in the sandbox with no program-side
// setup: the Agg backend (no display); its config and font cache go to
// HOME, the interpreter's private writable work directory.
var dataScienceEnv = []string{"MPLBACKEND=Agg"}

// dataSciencePaths are read by matplotlib and fontconfig (Debian keeps
// matplotlib's data outside site-packages); those that exist are readable in
// the sandbox.
var dataSciencePaths = []string{"/etc/alternatives", "/etc/fonts", "/usr/share/fonts", "/usr/share/fontconfig", "/usr/share/matplotlib", "/etc/matplotlibrc"}

// Execute runs one program in a fresh interpreter.
func (e *Env) Execute(ctx context.Context, in module.ExecutionInput) (module.Result, error) {
	e.mu.Lock()
	r, b := e.runner, e.b
	e.mu.Unlock()
	return r.Execute(ctx, b, in)
}

// Kill stops a queued or running execution; unknown eids are ignored.
func (e *Env) Kill(_ context.Context, eid int64) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.runner.Kill(eid)
	return nil
}

// Status reports the pools' health and the sandbox in force.
func (e *Env) Status() map[string]any {
	e.mu.Lock()
	defer e.mu.Unlock()
	tpl := map[string]any{"enabled": e.forking != nil}
	if e.forking == nil {
		tpl["reason"] = e.tplWhy
	}
	st := map[string]any{"interpreter": e.python, "version": e.version, "sandbox": e.layers, "template": tpl, "packages": e.packages}
	if b := e.builds.status(e.build, e.buildSeq); b != nil {
		st["build"] = b
	}
	maps.Copy(st, e.runner.Status())
	return st
}

// Workers counts the pools' workers and the templates' restarts.
func (e *Env) Workers() module.WorkerCounts {
	e.mu.Lock()
	r, forking, lean := e.runner, e.forking, e.leanForking
	e.mu.Unlock()
	c := r.Counts()
	if forking != nil {
		c.TemplateRestarts = forking.Restarts()
	}
	if lean != nil {
		c.TemplateRestarts += lean.Restarts()
	}
	return c
}

// Teardown kills what is still running, empties the pools and removes the
// extracted runtime.
func (e *Env) Teardown(ctx context.Context) error {
	e.mu.Lock()
	r, dir, forking, lean := e.runner, e.runtime, e.forking, e.leanForking
	e.runtime = ""
	e.mu.Unlock()
	err := r.Stop(ctx)
	for _, f := range []*worker.Forking{forking, lean} {
		if f != nil {
			err = errors.Join(err, f.Stop(ctx))
		}
	}
	if dir != "" {
		err = errors.Join(err, os.RemoveAll(dir))
	}
	return err
}
