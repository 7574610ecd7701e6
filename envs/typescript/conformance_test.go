package typescript

import (
	"context"
	"testing"

	"github.com/cyrnel/cyrnel/envs/envtest"
	"github.com/cyrnel/cyrnel/envs/module"
)

var programs = envtest.Programs{
	Print:      `console.log("hi"); console.error("warn");`,
	Output:     `cyrnel.output({a: 1, b: 1}); cyrnel.output({b: 2, c: "x"});`,
	Throw:      `throw new Error("boom");`,
	Syntax:     `let x: number = ;`,
	Loop:       `while (true) {}`,
	Block:      `console.log("started"); while (true) {}`,
	Await:      `await new Promise<void>(r => setTimeout(r, 10)); console.log("awaited");`,
	SetGlobal:  `(globalThis as any).leak = 1; (Array.prototype as any).leak = 1;`,
	ReadGlobal: `console.log((globalThis as any).leak === undefined && ([] as any).leak === undefined ? "clean" : "leaked");`,
	Tool:       `cyrnel.output({r: await cyrnel.services.echo.tools.twice.invoke({x: 21})});`,
	ToolError:  `try { await cyrnel.services.echo.tools.fail.invoke({}); } catch (e) { console.log((e as Error).message); }`,
	Flood:      `const s = "x".repeat(4096); while (true) console.log(s);`,
	Unicode:    `console.log("héllo €");`,
}

func TestConformance(t *testing.T) {
	t.Parallel()
	envtest.Conformance(t, func(t *testing.T, b module.Bindings) module.Environment {
		e := New(nil)
		if err := e.Setup(context.Background(), module.SetupContext{Bindings: b}); err != nil {
			t.Fatal(err)
		}
		return e
	}, programs)
}

// TestRunawaysEndOnlyTheirWorker: a memory bomb, deep recursion and a
// tight loop each end that execution with a precise reason, and the next
// one runs normally. The memory bomb gets a timeout it cannot reach: on a
// loaded machine filling 128 MiB took longer than 3 s once, and the
// execution then (rightly) timed out.
func TestRunawaysEndOnlyTheirWorker(t *testing.T) {
	t.Parallel()
	env, _ := newEnv(t, map[string]any{"limits": map[string]any{"memoryMb": 128.0}})
	cases := []struct {
		name, code string
		timeoutMs  int64
		exit       module.ExitState
		reason     module.Reason
	}{
		{"memory bomb", `const a: number[][] = []; while (true) a.push(new Array(1 << 20).fill(1));`, 120000, module.ExitFailed, module.ReasonMemoryLimit},
		{"deep recursion", `function f(n: number): number { return f(n + 1) + 1; } f(0);`, 3000, module.ExitFailed, module.ReasonException},
		{"tight loop", `for (;;) {}`, 3000, module.ExitTimeout, module.ReasonTimeout},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := execute(t, env, int64(100+i), c.code, c.timeoutMs)
			wantResult(t, res, c.exit, c.reason)
			if c.reason == module.ReasonMemoryLimit && res.PeakMemoryBytes < 100<<20 {
				t.Errorf("peak memory %d bytes, want about the 128 MiB limit", res.PeakMemoryBytes)
			}
			wantResult(t, execute(t, env, int64(200+i), `console.log("fine")`, 5000), module.ExitSuccess, module.ReasonCompleted)
		})
	}
}

// TestUsageReported: a TypeScript execution's result carries the CPU time
// and peak memory its worker's sandbox counted while it ran (the array is
// small: the race detector multiplies memory several times over).
func TestUsageReported(t *testing.T) {
	t.Parallel()
	env, _ := newEnv(t, nil)
	res := execute(t, env, 1, `let s = 0; const t0 = Date.now(); while (Date.now() - t0 < 300) s++; const a = new Array(1 << 20).fill(1); console.log(s > 0, a.length);`, 30000)
	wantResult(t, res, module.ExitSuccess, module.ReasonCompleted)
	if res.CPUMs < 100 || res.PeakMemoryBytes < 16<<20 {
		t.Errorf("got %d ms of CPU and a %d byte peak; want at least 100 ms and 16 MiB", res.CPUMs, res.PeakMemoryBytes)
	}
}
