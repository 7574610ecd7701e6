package python

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/envs/envtest"
	"github.com/cyrnel/cyrnel/envs/module"
)

// A config names a declared interpreter by any of its names, or none (the
// first); anything else, however it resolves, is ErrUndeclared at
// interpreter, and nothing of it is looked up.
func TestChooseOnlyDeclared(t *testing.T) {
	t.Parallel()
	declared := []Interpreter{
		{Name: "python3", Path: "/usr/local/bin/python3", Real: "/usr/local/bin/python3.12"},
		{Name: "/opt/venv/bin/python", Path: "/opt/venv/bin/python", Real: "/usr/bin/python3.11"},
	}
	for name, want := range map[string]string{
		"": "python3", "python3": "python3", "/usr/local/bin/python3": "python3", "/usr/local/bin/python3.12": "python3",
		"/usr/local/bin/../bin/python3": "python3", "/opt/venv/bin/python": "/opt/venv/bin/python", "/usr/bin/python3.11": "/opt/venv/bin/python",
	} {
		got, err := choose(declared, name)
		if err != nil || got.Name != want {
			t.Errorf("choose %q: %+v %v, want %s", name, got, err, want)
		}
	}
	for _, name := range []string{"/proc/1/root/usr/local/bin/python3", "python3.12", "/bin/sh", "sh", "python3 ", "/opt/venv/bin/python3", "./python3"} {
		_, err := choose(declared, name)
		var ce *module.ConfigError
		if !errors.As(err, &ce) || ce.Field != "interpreter" || !errors.Is(err, module.ErrUndeclared) {
			t.Errorf("choose %q: %v, want ErrUndeclared at interpreter", name, err)
		}
	}
	if _, err := choose(nil, ""); !errors.Is(err, module.ErrUndeclared) {
		t.Errorf("nothing declared: %v", err)
	}
}

// The probe runs the declared interpreter in the sandbox, never on the
// host: a declared "interpreter" that is a script writing a marker where
// root on the host could (and then running python3) sets up, and leaves no
// marker. Control: run on the host, the script leaves it.
func TestProbeRunsInTheSandbox(t *testing.T) {
	t.Parallel()
	// The system's: the sandbox reads /usr, not the script's exec target.
	const python = "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Fatal("this test needs the system's python3:", err)
	}
	// Readable by nobody, whom a root host's sandbox runs as; the sandbox
	// binds it read-only all the same.
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "ran-on-the-host")
	script := filepath.Join(dir, "python")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+marker+" 2>/dev/null\nexec "+python+" \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	declared, err := Declare([]string{script})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e := New(slog.New(slog.NewTextHandler(io.Discard, nil)), Options{Interpreters: declared})
	err = e.Setup(ctx, module.SetupContext{Bindings: envtest.NewRecorder(), Config: map[string]any{"poolSize": 1, "fork": false}})
	if terr := e.Teardown(ctx); terr != nil {
		t.Error(terr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the host ran the interpreter outside the sandbox")
	}
	// The runtime was compiled (in the sandbox) for the interpreters.
	if st := e.Status(); !strings.HasPrefix(st["version"].(string), "3.") {
		t.Errorf("status after the probe: %v", st)
	}
	if out, err := exec.Command(script, "-c", "pass").CombinedOutput(); err != nil {
		t.Fatalf("control: %v: %s", err, out)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("control: the script left no marker on the host: %v", err)
	}
}

// The probe compiles the runtime in the sandbox; the host stores the
// bytecode under the runtime's own names, one file per source.
func TestRuntimeBytecodeFromTheProbe(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := New(slog.New(slog.NewTextHandler(io.Discard, nil)), testOptions)
	if err := e.Setup(ctx, module.SetupContext{Bindings: envtest.NewRecorder(), Config: map[string]any{"poolSize": 1}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Teardown(ctx) })
	sources, _ := filepath.Glob(filepath.Join(e.runtime, "cyrnel", "*.py"))
	pycs, _ := filepath.Glob(filepath.Join(e.runtime, "cyrnel", "__pycache__", "*.pyc"))
	if len(sources) == 0 || len(pycs) != len(sources) {
		t.Fatalf("%d sources, bytecode %v", len(sources), pycs)
	}
}

// The host writes bytecode only for its own sources, under a tag that is
// a file name.
func TestWriteBytecodeRefusesForeignNames(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sources := map[string]bool{"cyrnel/a.py": true}
	for _, c := range []struct {
		tag string
		pyc map[string]string
	}{
		{"cpython-312", map[string]string{"../../etc/x.py": ""}},
		{"../x", map[string]string{"cyrnel/a.py": ""}},
		{"cpython-312", map[string]string{"cyrnel/b.py": ""}},
	} {
		if err := writeBytecode(dir, sources, c.tag, c.pyc); err == nil {
			t.Errorf("tag %q, %v: written", c.tag, c.pyc)
		}
	}
	if err := writeBytecode(dir, sources, "cpython-312", map[string]string{"cyrnel/a.py": "AAAA"}); err != nil {
		t.Fatal("control:", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cyrnel", "__pycache__", "a.cpython-312.pyc")); err != nil {
		t.Fatal("control:", err)
	}
}

// The probe reads the interpreter's directory and its parent, never the
// host's root.
func TestProbeReadPathsNeverTheRoot(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d    Interpreter
		want []string
	}{
		{Interpreter{Path: "/opt/py/bin/python3", Real: "/opt/py/bin/python3.12"}, []string{"/opt/py/bin", "/opt/py", "/opt/py/bin", "/opt/py"}},
		{Interpreter{Path: "/bin/python3", Real: "/python3"}, []string{"/bin"}},
	} {
		got := c.d.probeReadPaths()
		if len(got) > 0 && got[len(got)-1] == "/etc/alternatives" {
			got = got[:len(got)-1]
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%+v: %v, want %v", c.d, got, c.want)
		}
	}
}
