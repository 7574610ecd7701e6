package python

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/envs/envtest"
	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/envs/worker"
)

// Where asyncio is preloaded, a program that never says async or await
// runs in an interpreter without it, and one that does finds it imported;
// one that reaches asyncio without saying so imports it itself and runs
// all the same. With asyncio not preloaded there is one pool. Forked from
// templates and spawned alike.
func TestAsyncioOnlyWhereAwaited(t *testing.T) {
	t.Parallel()
	// Each program reports whether asyncio was imported before its own
	// first line: the runtime's modules are imported by then.
	const before = "import sys\nhad = 'asyn' 'cio' in sys.modules\n"
	for _, c := range []struct {
		name, code, want string
	}{
		{"plain", before + "print(had)", "False\n"},
		{"awaits", before + "import asyncio\nawait asyncio.sleep(0)\nprint(had)", "True\n"},
		{"says async in a comment", before + "print(had)  # not async at all", "True\n"},
		{"reaches asyncio unsaid", before + "import importlib\nm = importlib.import_module('asyn' 'cio')\nprint(had, m.run(m.sleep(0, 'ran')))", "False ran\n"},
	} {
		for _, fork := range []bool{true, false} {
			t.Run(map[bool]string{true: "fork/", false: "spawn/"}[fork]+c.name, func(t *testing.T) {
				t.Parallel()
				rec := envtest.NewRecorder()
				e := New(slog.New(slog.NewTextHandler(io.Discard, nil)), testOptions)
				if err := e.Setup(context.Background(), module.SetupContext{Bindings: rec, Config: map[string]any{"poolSize": 1, "fork": fork}}); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { e.Teardown(context.Background()) })
				if fork && (e.forking == nil || e.leanForking == nil) {
					t.Fatalf("no templates: %s", e.tplWhy)
				}
				res, err := e.Execute(context.Background(), module.ExecutionInput{EID: 1, Code: c.code, Options: module.Options{TimeoutMs: 20000}})
				if err != nil {
					t.Fatal(err)
				}
				if r := rec.Get(1); res.Exit != module.ExitSuccess || string(r.Stdout) != c.want {
					t.Fatalf("%+v stdout %q (want %q) stderr %q", res, r.Stdout, c.want, r.Stderr)
				}
				if _, ok := e.Status()["asyncioPool"].(worker.Stats); !ok {
					t.Errorf("status without the asyncio pool: %v", e.Status())
				}
			})
		}
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

// leanPreload leaves asyncio out and keeps the rest in order; awaits
// finds either word anywhere.
func TestLeanPreload(t *testing.T) {
	t.Parallel()
	if got := leanPreload([]string{"numpy", "asyncio", "pandas"}); strings.Join(got, ",") != "numpy,pandas" {
		t.Errorf("leanPreload = %v", got)
	}
	if got := leanPreload([]string{"asyncio"}); got == nil || len(got) != 0 {
		t.Errorf("leanPreload(asyncio) = %#v, want empty", got)
	}
	if got := leanPreload([]string{"json"}); got != nil {
		t.Errorf("leanPreload(json) = %v, want nil", got)
	}
	for code, want := range map[string]bool{"pass": false, "x = 1\nawait f()": true, "async def f(): pass": true, "'asyncio'": true, "a_wait = 1": false} {
		if got := awaits(module.ExecutionInput{Code: code}); got != want {
			t.Errorf("awaits(%q) = %v", code, got)
		}
	}
}
