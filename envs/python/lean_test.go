package python

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/envs/envtest"
	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/envs/worker"
)

// Where asyncio is preloaded, a program that never says async or await
// runs in an interpreter without it, from the pool without it; one that
// does, or whose Python files do, runs in the asyncio pool with asyncio
// imported before its first line; one that reaches asyncio without saying
// so imports it itself and runs all the same. Forked from templates and
// spawned alike. With asyncio not preloaded there is one pool.
func TestAsyncioOnlyWhereAwaited(t *testing.T) {
	t.Parallel()
	// Each program prints whether asyncio was imported before its first
	// line, in a way that does not itself say the word.
	const had = "import sys\nprint('asyn' 'cio' in sys.modules)"
	cases := []struct {
		name, code string
		files      []module.File
		asyncio    bool // runs in the asyncio pool
		want       string
	}{
		{name: "plain", code: had, want: "False\n"},
		{name: "says async in a comment", code: had + "  # not async at all", asyncio: true, want: "True\n"},
		{name: "its module awaits", code: had + "\nimport runpy\nrunpy.run_path('helper.py')", files: []module.File{{Path: "helper.py", Content: []byte("async def f(): pass\n")}}, asyncio: true, want: "True\n"},
		{name: "a text file says await", code: had, files: []module.File{{Path: "notes.txt", Content: []byte("await")}}, want: "False\n"},
		{name: "awaits", code: "import asyncio\nawait asyncio.sleep(0)\nprint('awaited')", asyncio: true, want: "awaited\n"},
		{name: "reaches asyncio unsaid", code: had + "\nimport importlib\nm = importlib.import_module('asyn' 'cio')\nprint(m.run(m.sleep(0, 'ran')))", want: "False\nran\n"},
	}
	for _, fork := range []bool{true, false} {
		t.Run(map[bool]string{true: "fork", false: "spawn"}[fork], func(t *testing.T) {
			t.Parallel()
			rec := envtest.NewRecorder()
			e := New(slog.New(slog.NewTextHandler(io.Discard, nil)), testOptions)
			if err := e.Setup(context.Background(), module.SetupContext{Bindings: rec, Config: map[string]any{"poolSize": 1, "fork": fork}}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { e.Teardown(context.Background()) })
			if fork && (e.forking == nil || e.leanForking == nil) {
				if why := os.Getenv("CYRNEL_TEST_NO_SANDBOX"); why != "" {
					t.Skipf("no template on this machine: %s (CYRNEL_TEST_NO_SANDBOX: %s)", e.tplWhy, why)
				}
				t.Fatalf("no templates on this machine: %s; set CYRNEL_TEST_NO_SANDBOX=<why> on a machine that cannot sandbox", e.tplWhy)
			}
			served := func() (lean, asyncio int64) {
				st := e.Status()
				return st["pool"].(worker.Stats).Served, st["asyncioPool"].(worker.Stats).Served
			}
			for i, c := range cases {
				lean0, asyncio0 := served()
				eid := int64(i + 1)
				res, err := e.Execute(context.Background(), module.ExecutionInput{EID: eid, Code: c.code, Files: c.files, Options: module.Options{TimeoutMs: 20000}})
				if err != nil {
					t.Fatal(err)
				}
				if r := rec.Get(eid); res.Exit != module.ExitSuccess || string(r.Stdout) != c.want {
					t.Errorf("%s: %+v stdout %q (want %q) stderr %q", c.name, res, r.Stdout, c.want, r.Stderr)
				}
				lean1, asyncio1 := served()
				if got := asyncio1 - asyncio0; (got == 1) != c.asyncio || lean1-lean0+got != 1 {
					t.Errorf("%s: served %d from the pool without asyncio and %d from the asyncio pool; want it from the asyncio pool: %v", c.name, lean1-lean0, got, c.asyncio)
				}
			}
		})
	}
	t.Run("not preloaded", func(t *testing.T) {
		t.Parallel()
		e := setupEnv(t, map[string]any{"poolSize": 1, "preload": []string{"json"}})
		if e.lean != nil || e.leanForking != nil {
			t.Fatalf("lean preload %v without asyncio preloaded", e.lean)
		}
		if st := e.Status(); st["asyncioPool"] != nil {
			t.Fatalf("an asyncio pool without asyncio preloaded: %v", st)
		}
	})
}

// leanPreload leaves asyncio and its submodules out and keeps the rest in
// order; awaits finds either word anywhere in the code or a Python file.
func TestLeanPreload(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		preload []string
		want    []string
	}{
		{[]string{"numpy", "asyncio", "pandas"}, []string{"numpy", "pandas"}},
		{[]string{"asyncio"}, []string{}},
		{[]string{"asyncio.subprocess", "json"}, []string{"json"}},
		{[]string{"json", "asyncio_extras"}, nil},
	} {
		got := leanPreload(c.preload)
		if (got == nil) != (c.want == nil) || strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("leanPreload(%v) = %#v, want %#v", c.preload, got, c.want)
		}
	}
	for code, want := range map[string]bool{"pass": false, "x = 1\nawait f()": true, "async def f(): pass": true, "'asyncio'": true, "a_wait = 1": false} {
		if got := awaits(module.ExecutionInput{Code: code}); got != want {
			t.Errorf("awaits(%q) = %v", code, got)
		}
	}
}

// A preload module that fails is named by its place in the config, also
// when an interpreter without asyncio numbered it in its own preload.
func TestPreloadErrorNamesTheConfigsPlace(t *testing.T) {
	t.Parallel()
	preload := []string{"asyncio", "json", "no_such"}
	for line, want := range map[string]string{
		"cyrnel: preload[1] no_such: ModuleNotFoundError: No module named 'no_such'": "preload[2]", // without asyncio
		"cyrnel: preload[2] no_such: ModuleNotFoundError: No module named 'no_such'": "preload[2]",
	} {
		field, why, ok := preloadError(errors.New("start: "+line+"\n"), preload)
		if !ok || field != want || !strings.Contains(why.Error(), "cannot import no_such in the sandbox: ModuleNotFoundError") {
			t.Errorf("%q: %q %v %v, want %s", line, field, why, ok, want)
		}
	}
	if _, _, ok := preloadError(errors.New("some other failure"), preload); ok {
		t.Error("an error that names no preload module was read as one")
	}
}
