package tests

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// tsExpect checks that a TypeScript program succeeded with this stdout.
func tsExpect(p proc, stdout string) error {
	if p.exit() != "success" {
		return fmt.Errorf("%s/%s: %s %s", p.exit(), p.reason(), p.Error, p.Stderr)
	}
	if p.Stdout != stdout {
		return fmt.Errorf("stdout %q, want %q", p.Stdout, stdout)
	}
	return nil
}

// tsFails checks that a TypeScript program failed with an error saying says.
func tsFails(p proc, says string) error {
	if p.exit() != "failed" || !strings.Contains(p.Error+p.Stderr, says) {
		return fmt.Errorf("%s/%s %q %q, want failed saying %q", p.exit(), p.reason(), p.Error, p.Stderr, says)
	}
	return nil
}

// tsCapabilities are what the TypeScript guide may say, each with the
// words it says it with and a program that shows whether the environment
// does it. Some are absences the guide states ("no `fetch`"): their check
// shows the absence.
var tsCapabilities = []capability{
	{"fresh runtime", "Each execution gets a fresh runtime, so nothing", func(h *host) error {
		h.run("globalThis.leftover = 1", nil)
		return tsExpect(h.run("console.log(typeof (globalThis as any).leftover)", nil), "undefined\n")
	}},
	{"top-level await", "top-level `await` works", func(h *host) error {
		return tsExpect(h.run("const v = await Promise.resolve(41);\nconsole.log(v + 1)", nil), "42\n")
	}},
	{"top-level return", "top-level `return` (it ends the program successfully)", func(h *host) error {
		return tsExpect(h.run("console.log('a');\nreturn;\nconsole.log('b')", nil), "a\n")
	}},
	{"no modules", "`import` (static or dynamic) and `export` are syntax errors", func(h *host) error {
		for _, code := range []string{"import x from 'y';\nconsole.log(x)", "export const a = 1", "const m = await import('y')"} {
			if err := tsFails(h.run(code, nil), "SyntaxError"); err != nil {
				return fmt.Errorf("%q: %w", code, err)
			}
		}
		return nil
	}},
	{"pending timers dropped", "Timers still pending are dropped", func(h *host) error {
		return tsExpect(h.run("setTimeout(() => console.log('late'), 50);\nconsole.log('done')", nil), "done\n")
	}},
	{"unhandled rejection fails", "when a promise is rejected with no handler", func(h *host) error {
		return tsFails(h.run("Promise.reject(new Error('nobody'));\nconsole.log('x')", nil), "nobody")
	}},
	{"TypeScript positions", "TypeScript line:column positions (`main.ts:12:5`)", func(h *host) error {
		p := h.run("const a: number = 1;\nconst o: any = null;\nconsole.log(o.x + a)", nil)
		if err := tsFails(p, "TypeError"); err != nil {
			return err
		}
		if !strings.Contains(p.Stderr, "main.ts:3:") {
			return fmt.Errorf("stderr %q names no main.ts:3 position", p.Stderr)
		}
		return nil
	}},
	{"output", "`cyrnel.output(obj)` | Merges", func(h *host) error {
		var p proc
		h.do("POST", "/processes", map[string]any{"code": "cyrnel.output({a: 1, b: 1});\ncyrnel.output({b: 2})", "waitMs": 60000}, &p)
		if p.exit() != "success" || fmt.Sprint(p.Output) != "map[a:1 b:2]" {
			return fmt.Errorf("%s output %v", p.exit(), p.Output)
		}
		return nil
	}},
	{"console streams", "`console.warn/error(...args)` | Writes a line to stderr", func(h *host) error {
		p := h.run("console.log('o', {k: 1});\nconsole.info('i');\nconsole.debug('d');\nconsole.warn('w');\nconsole.error('e')", nil)
		if err := tsExpect(p, "o {\"k\":1}\ni\nd\n"); err != nil {
			return err
		}
		if p.Stderr != "w\ne\n" {
			return fmt.Errorf("stderr %q", p.Stderr)
		}
		return nil
	}},
	{"timers", "`setTimeout(fn, ms, ...args)` / `clearTimeout(id)`", func(h *host) error {
		return tsExpect(h.run("const t = setTimeout(() => console.log('cleared'), 1);\nclearTimeout(t);\n"+
			"await new Promise(r => setTimeout(r, 5, 'x'));\nconsole.log('waited')", nil), "waited\n")
	}},
	{"no require, file system, network, fetch", "no `require`, no file system,\nno network, no `fetch`", func(h *host) error {
		return tsExpect(h.run("const g = globalThis as any;\nconsole.log(typeof g.require, typeof g.fetch, typeof g.process, typeof g.XMLHttpRequest)", nil),
			"undefined undefined undefined undefined\n")
	}},
	{"listing services", "`Object.keys(cyrnel.services)` lists the services", func(h *host) error {
		return tsExpect(h.run("console.log(Array.isArray(Object.keys(cyrnel.services)))", nil), "true\n")
	}},
	{"unknown tool rejects", "an unknown name still yields an object whose `invoke` rejects", func(h *host) error {
		return tsExpect(h.run("try {\n  await cyrnel.services.nosuch.tools.nothing.invoke({});\n  console.log('resolved')\n} catch (e) {\n  console.log((e as Error).name)\n}", nil), "ToolError\n")
	}},
	{"timeout in a tight loop", "ends `timeout`, even in a tight loop", func(h *host) error {
		p := h.run("while (true) {}", map[string]any{"timeoutMs": 300})
		if p.exit() != "timeout" {
			return fmt.Errorf("%s/%s", p.exit(), p.reason())
		}
		return nil
	}},
	{"call depth", "Call depth: 10000 frames", func(h *host) error {
		return tsFails(h.run("function f(n: number): number { return f(n + 1) + 1 }\nf(0)", nil), "Maximum call stack size exceeded")
	}},
	{"not available", "Not available: async iteration helpers such as `Array.fromAsync`, `Intl`", func(h *host) error {
		return tsExpect(h.run("const g = globalThis as any;\nconsole.log([(Array as any).fromAsync, g.Intl, g.structuredClone, g.TextEncoder, g.queueMicrotask, g.setInterval].map(x => typeof x).join(' '))", nil),
			"undefined undefined undefined undefined undefined undefined\n")
	}},
	{"async generators", "Async generators and `for await` work", func(h *host) error {
		return tsExpect(h.run("async function* g() { yield 1; yield 2 }\nlet s = 0;\nfor await (const v of g()) s += v;\nconsole.log(s)", nil), "3\n")
	}},
	// What the Python environment has and this one may not: the guide
	// must not claim them unless a program shows them.
	{"sessions", "POST /sessions", func(h *host) error {
		var s sessionView
		if st, _ := h.do("POST", "/sessions", map[string]any{}, &s); st != http.StatusCreated {
			return fmt.Errorf("create a session: %d", st)
		}
		h.do("DELETE", "/sessions/"+s.ID, nil, nil)
		return nil
	}},
	{"displays", "cyrnel.display", func(h *host) error {
		return tsExpect(h.run("console.log(typeof (cyrnel as any).display)", nil), "function\n")
	}},
}

// TestTypeScriptGuideTellsTheTruth: every capability the TypeScript guide
// names (and every absence it states) is what a program finds, and what
// the Python guide names that TypeScript does not do (sessions, displays)
// it does not claim.
func TestTypeScriptGuideTellsTheTruth(t *testing.T) {
	t.Parallel()
	h := start(t, "")
	if st, _ := h.do("PUT", "/environment", map[string]any{"module": "typescript"}, nil); st != http.StatusOK {
		t.Fatalf("activate typescript: %d", st)
	}
	st, _, b := h.raw("GET", "/environment/docs", "", nil)
	if st != http.StatusOK || !strings.HasPrefix(string(b), "# TypeScript environment") {
		t.Fatalf("docs: %d %.80s", st, b)
	}
	doc := string(b)
	for _, c := range tsCapabilities {
		err := c.check(h)
		says := strings.Contains(doc, c.phrase)
		switch {
		case err == nil && !says:
			t.Errorf("the guide omits %s (%q), which the environment does", c.name, c.phrase)
		case err != nil && says:
			t.Errorf("the guide says %s (%q), which the environment does not do: %v", c.name, c.phrase, err)
		case err != nil:
			t.Logf("%s: not done, not claimed (%v)", c.name, err)
		}
	}
}
