package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

type envStatus struct {
	Active *struct {
		Module   string `json:"module"`
		InFlight int    `json:"inFlight"`
	} `json:"active"`
	Draining []struct {
		Module   string `json:"module"`
		InFlight int    `json:"inFlight"`
	} `json:"draining"`
}

func TestSwitchEnvironmentsAtRuntime(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := start(t, dir)

	// A Python program is running when the operator switches.
	var py proc
	h.do("POST", "/processes", map[string]any{"code": "import time\nprint('py up', flush=True)\ntime.sleep(1.5)\ncyrnel.output({'lang': 'python'})\nprint('py done')"}, &py)
	h.waitFor(py.PID, func(p proc) bool { return p.Stdout == "py up\n" })
	var env envStatus
	if st, _ := h.do("PUT", "/environment", map[string]any{"module": "typescript"}, &env); st != 200 || env.Active.Module != "typescript" {
		t.Fatalf("switch: %d %+v", st, env)
	}
	if len(env.Draining) != 1 || env.Draining[0].Module != "python" || env.Draining[0].InFlight != 1 {
		t.Fatalf("python not draining with its execution: %+v", env)
	}

	// New processes run TypeScript at once.
	ts := h.run(strings.Join([]string{
		"interface Pet { name: string; age: number }",
		"function oldest<T extends Pet>(xs: T[]): T { return xs.reduce((a, b) => (a.age >= b.age ? a : b)); }",
		"const p = await Promise.resolve(oldest([{ name: 'rex', age: 3 }, { name: 'tom', age: 7 }]));",
		"console.log(p);",
		"cyrnel.output({ oldest: p.name });",
	}, "\n"), nil)
	if ts.exit() != "success" || ts.Output["oldest"] != "tom" || !strings.Contains(ts.Stdout, `"name":"tom"`) {
		t.Fatalf("typescript: %+v", ts)
	}
	var docs string
	h.do("GET", "/environment/docs", nil, &docs)
	if !strings.Contains(docs, "invoke(") {
		t.Fatalf("docs are not the active environment's: %.200s", docs)
	}
	failed := h.run("const x: number = 1;\nthrow new TypeError('nope ' + x);", nil)
	if failed.exit() != "failed" || failed.Error != "TypeError: nope 1" || !strings.Contains(failed.Stderr, "2:") {
		t.Fatalf("throw: %+v", failed)
	}
	if p := h.run("let x = ;", nil); p.exit() != "failed" || !strings.Contains(p.Error, "SyntaxError") {
		t.Fatalf("syntax error: %+v", p)
	}
	if p := h.run("while (true) {}", map[string]any{"timeoutMs": 300}); p.exit() != "timeout" {
		t.Fatalf("loop: %+v", p)
	}

	// Switch back while the Python program still runs; it finishes intact.
	if st, _ := h.do("PUT", "/environment", map[string]any{"module": "python"}, &env); st != 200 || env.Active.Module != "python" {
		t.Fatalf("switch back: %d %+v", st, env)
	}
	h.do("GET", fmt.Sprintf("/processes/%d/wait?timeoutMs=20000", py.PID), nil, &py)
	if py.exit() != "success" || py.Stdout != "py up\npy done\n" || py.Output["lang"] != "python" {
		t.Fatalf("python program across switches: %+v", py)
	}
	if p := h.run("print('python again')", nil); p.exit() != "success" || p.Stdout != "python again\n" {
		t.Fatalf("python after switching back: %+v", p)
	}

	// Unknown, disabled or non-environment modules change nothing.
	var prob problem
	for _, m := range []string{"nope", "openapi"} {
		if st, _ := h.do("PUT", "/environment", map[string]any{"module": m}, &prob); st < 400 || st >= 500 {
			t.Fatalf("switch to %s: %d", m, st)
		}
	}
	h.do("PATCH", "/modules/typescript", map[string]any{"enabled": false}, nil)
	if st, _ := h.do("PUT", "/environment", map[string]any{"module": "typescript"}, &prob); st != 422 {
		t.Fatalf("switch to a disabled module: %d %+v", st, prob)
	}
	h.do("PATCH", "/modules/typescript", map[string]any{"enabled": true}, nil)
	// A config that makes Setup fail is refused and the active one stays.
	if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"preload": []string{"no_such_module_for_cyrnel"}}, &prob); st != 422 {
		t.Fatalf("bad preload: %d %+v", st, prob)
	}
	if p := h.run("print('still fine')", nil); p.exit() != "success" {
		t.Fatalf("after a refused config: %+v", p)
	}

	// The choice survives a restart.
	h.do("PUT", "/environment", map[string]any{"module": "typescript"}, nil)
	h.cmd.Process.Kill()
	<-h.exited
	h2 := start(t, dir)
	h2.do("GET", "/environment", nil, &env)
	if env.Active == nil || env.Active.Module != "typescript" {
		t.Fatalf("after restart: %+v", env)
	}
	if p := h2.run("console.log(1 + 1)", nil); p.exit() != "success" || p.Stdout != "2\n" {
		t.Fatalf("typescript after restart: %+v", p)
	}
}

// TestUnknownModuleListsTheModules: naming a module there is not (ruby) is
// a 422 that lists the ones there are, for PUT /environment and GET
// /modules/{id}; the control: python, which exists, activates.
func TestUnknownModuleListsTheModules(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	var p problem
	if st, _ := h.do("PUT", "/environment", map[string]any{"module": "ruby"}, &p); st != http.StatusUnprocessableEntity ||
		len(p.Errors) != 1 || !strings.Contains(p.Errors[0].Message, "python") || !strings.Contains(p.Errors[0].Message, "typescript") {
		t.Fatalf("PUT /environment ruby: %d %+v", st, p)
	}
	var body string
	if st, _ := h.do("GET", "/modules/ruby", nil, &body); st != http.StatusNotFound || !strings.Contains(body, "python") {
		t.Fatalf("GET /modules/ruby: %d %s", st, body)
	}
	if st, _ := h.do("PUT", "/environment", map[string]any{"module": "python"}, nil); st != http.StatusOK {
		t.Fatalf("PUT /environment python: %d", st)
	}
}
