package python

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/envs/worker"
)

// Interpreter is a Python the operator declared when starting the host
// (serve --python, CYRNEL_PYTHON). A module config may name only these; the
// host runs programs with them only in the sandbox; outside it, only pip,
// to resolve declared packages (packages_pip.go).
type Interpreter struct {
	Name string // as declared: python3, /opt/venv/bin/python
	// Path is Name made absolute (looked up on PATH), its symlinks kept:
	// what the sandbox runs, so a virtual environment's python still finds
	// its pyvenv.cfg.
	Path string
	Real string // Path with every symlink resolved
}

// Declare resolves the operator's interpreters, once, at start-up: each
// must be an executable file (a name is looked up on the host's PATH).
func Declare(names []string) ([]Interpreter, error) {
	out := make([]Interpreter, 0, len(names))
	for _, name := range names {
		if name == "" {
			return nil, errors.New("python interpreter: empty name")
		}
		path, err := exec.LookPath(name)
		if err != nil {
			return nil, fmt.Errorf("python interpreter %q: %w", name, err)
		}
		if path, err = filepath.Abs(path); err != nil {
			return nil, fmt.Errorf("python interpreter %q: %w", name, err)
		}
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			return nil, fmt.Errorf("python interpreter %q: %w", name, err)
		}
		out = append(out, Interpreter{Name: name, Path: path, Real: real})
	}
	return out, nil
}

// choose returns the declared interpreter a config names ("" names the
// first). The name is compared as a string with what each declared one
// was called, its absolute path and its real path: nothing an API caller
// names is looked up, opened or run on the host.
func choose(declared []Interpreter, name string) (Interpreter, error) {
	if len(declared) == 0 {
		return Interpreter{}, &module.ConfigError{Field: "interpreter", Err: fmt.Errorf("%w: no Python interpreter is declared (start the server with --python PATH or CYRNEL_PYTHON)", module.ErrUndeclared)}
	}
	if name == "" {
		return declared[0], nil
	}
	clean := name
	if filepath.IsAbs(name) {
		clean = filepath.Clean(name)
	}
	names := make([]string, len(declared))
	for i, d := range declared {
		if name == d.Name || clean == d.Path || clean == d.Real {
			return d, nil
		}
		names[i] = d.Path
	}
	return Interpreter{}, &module.ConfigError{Field: "interpreter", Err: fmt.Errorf("%w: %q is not one of the interpreters the server was started with (%s); the operator declares them with serve --python or CYRNEL_PYTHON",
		module.ErrUndeclared, name, strings.Join(names, ", "))}
}

// probeReadPaths is what the sandbox lets the probe read before it knows
// the interpreter's prefixes: the directories of its path and of its real
// path, and their parents (the installation: /opt/python3.12, a virtual
// environment), never the root itself.
func (d Interpreter) probeReadPaths() []string {
	var paths []string
	for _, p := range []string{d.Path, d.Real} {
		for dir, up := filepath.Dir(p), 0; up < 2 && dir != "/"; dir, up = filepath.Dir(dir), up+1 {
			paths = append(paths, dir)
		}
	}
	if _, err := os.Stat("/etc/alternatives"); err == nil {
		paths = append(paths, "/etc/alternatives")
	}
	return paths
}

// probeCode asks the interpreter what it is and compiles the runtime
// (sys.argv[1]) into bytecode it returns, base64 per source file: the
// interpreter may write nothing but its own /tmp.
const probeCode = `import base64, json, os, platform, py_compile, site, sys
from importlib import metadata
root, tmp, pyc = sys.argv[1], os.path.join(os.environ["TMPDIR"], "cyrnel.pyc"), {}
for d, _, files in os.walk(root):
    for f in files:
        if f.endswith(".py"):
            src = os.path.join(d, f)
            py_compile.compile(src, cfile=tmp, doraise=True)
            with open(tmp, "rb") as fh:
                pyc[os.path.relpath(src, root)] = base64.b64encode(fh.read()).decode()
pkgs = {}
for d in metadata.distributions(path=site.getsitepackages()):
    name = d.metadata["Name"]
    if name and name.lower() not in pkgs:  # the first on the path is the one imported
        pkgs[name.lower()] = {"name": name, "version": d.version}
print(json.dumps({"exe": sys.executable, "site": site.getsitepackages(), "version": platform.python_version(),
    "packages": sorted(pkgs.values(), key=lambda p: p["name"].lower()),
    "prefixes": sorted({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}),
    "cacheTag": sys.implementation.cache_tag, "pyc": pyc}))`

// probeOutputLimit bounds the probe's answer (the runtime's bytecode is
// about 200 KiB).
const probeOutputLimit = 16 << 20

// cacheTag is what a cache tag may look like (cpython-313): it becomes part
// of a file name.
var cacheTag = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// probeInterpreter runs d in the sandbox l to learn its real executable
// (python3 on PATH may be a shim script costing 60-100 ms per start), its
// site-packages and prefixes, and to compile the runtime in dir (whose
// source files are sources) into its __pycache__.
func probeInterpreter(ctx context.Context, l worker.Launcher, d Interpreter, dir string, sources map[string]bool) (interpreter, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	out, err := worker.Output(ctx, l, worker.Command{Path: d.Path, Args: []string{"-I", "-c", probeCode, dir}}, probeOutputLimit)
	if err != nil {
		return interpreter{}, fmt.Errorf("probe python interpreter %s in the sandbox: %w", d.Path, err)
	}
	var p struct {
		Exe      string            `json:"exe"`
		Site     []string          `json:"site"`
		Prefixes []string          `json:"prefixes"`
		Version  string            `json:"version"`
		CacheTag string            `json:"cacheTag"`
		Pyc      map[string]string `json:"pyc"`
		Packages []Package         `json:"packages"`
	}
	if err := json.Unmarshal(out, &p); err != nil || !filepath.IsAbs(p.Exe) {
		return interpreter{}, fmt.Errorf("probe python interpreter %s: unexpected answer %.200q", d.Path, out)
	}
	if err := writeBytecode(dir, sources, p.CacheTag, p.Pyc); err != nil {
		return interpreter{}, err
	}
	py := interpreter{exe: p.Exe, version: p.Version, packages: p.Packages}
	py.site = existingDirs(p.Site)
	py.prefixes = existingDirs(p.Prefixes)
	return py, nil
}

// writeBytecode stores the compiled runtime the probe returned: only for
// the source files the host extracted, under names the host makes.
func writeBytecode(dir string, sources map[string]bool, tag string, pyc map[string]string) error {
	if tag == "" {
		return nil // an implementation without a bytecode cache
	}
	if !cacheTag.MatchString(tag) {
		return fmt.Errorf("probe python interpreter: unexpected cache tag %q", tag)
	}
	for rel, b64 := range pyc {
		if !sources[rel] {
			return fmt.Errorf("probe python interpreter: bytecode for %q, which is not a runtime source", rel)
		}
		b, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return fmt.Errorf("probe python interpreter: bytecode for %s: %w", rel, err)
		}
		cache := filepath.Join(dir, filepath.Dir(rel), "__pycache__")
		if err := os.MkdirAll(cache, 0o755); err != nil {
			return fmt.Errorf("compile the python runtime: %w", err)
		}
		name := strings.TrimSuffix(filepath.Base(rel), ".py") + "." + tag + ".pyc"
		if err := os.WriteFile(filepath.Join(cache, name), b, 0o644); err != nil {
			return fmt.Errorf("compile the python runtime: %w", err)
		}
	}
	return nil
}

// existingDirs keeps the directories of paths that exist.
func existingDirs(paths []string) []string {
	var out []string
	for _, d := range paths {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			out = append(out, d)
		}
	}
	return out
}
