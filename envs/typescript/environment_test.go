package typescript

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/envs/worker"
)

func wantResult(t *testing.T, got module.Result, exit module.ExitState, reason module.Reason) {
	t.Helper()
	if got.Exit != exit || got.Reason != reason {
		t.Fatalf("result = %+v, want %s/%s", got, exit, reason)
	}
}

func TestTypedCodeWithInterfacesAndGenerics(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	code := `
interface Pet { id: number; name: string; tags?: string[] }
type Named<T> = T & { label: string };
enum Color { Red, Green }

class Box<T> {
  constructor(private readonly value: T) {}
  map<U>(f: (v: T) => U): Box<U> { return new Box(f(this.value)); }
  get(): T { return this.value; }
}

function label<T extends { name: string }>(x: T): Named<T> {
  return { ...x, label: x.name.toUpperCase() };
}

const pet: Pet = { id: 1, name: "rex" };
const boxed = new Box(pet).map((p) => label(p)).get();
await new Promise<void>((resolve) => setTimeout(resolve, 1));
console.log("pet", boxed, [1, 2], Color.Green, null, undefined, true, 2n);
console.info({ nested: { a: [1, { b: "c" }] } });
console.debug("debug line");
console.warn("warned", { w: 1 });
console.error(new TypeError("shown"));
`
	wantResult(t, execute(t, env, 1, code, 5000), module.ExitSuccess, module.ReasonCompleted)
	wantOut := "pet {\"id\":1,\"name\":\"rex\",\"label\":\"REX\"} [1,2] 1 null undefined true 2n\n" +
		"{\"nested\":{\"a\":[1,{\"b\":\"c\"}]}}\n" +
		"debug line\n"
	if got := rec.Stdout(1); got != wantOut {
		t.Errorf("stdout = %q, want %q", got, wantOut)
	}
	stderr := rec.Stderr(1)
	if !strings.HasPrefix(stderr, "warned {\"w\":1}\nTypeError: shown\n    at main.ts:23:15\n") {
		t.Errorf("stderr = %q", stderr)
	}
}

func TestTopLevelAwaitAndReturn(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	code := `
const v = await Promise.resolve(41);
if (v === 41) {
  console.log("returning");
  return;
}
console.log("not reached");
`
	wantResult(t, execute(t, env, 1, code, 5000), module.ExitSuccess, module.ReasonCompleted)
	if got := rec.Stdout(1); got != "returning\n" {
		t.Errorf("stdout = %q", got)
	}
}

func TestAsyncGeneratorsAndForAwait(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	code := `
async function* count(n: number): AsyncGenerator<number> {
  for (let i = 0; i < n; i++) {
    await null;
    yield i;
  }
}
const seen: number[] = [];
for await (const i of count(3)) seen.push(i);
for await (const x of [Promise.resolve("a"), "b"]) seen.push(x as any);
console.log(seen);
`
	wantResult(t, execute(t, env, 1, code, 5000), module.ExitSuccess, module.ReasonCompleted)
	if got := rec.Stdout(1); got != "[0,1,2,\"a\",\"b\"]\n" {
		t.Errorf("stdout = %q", got)
	}
}

func TestConsoleFormatsAwkwardValues(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	code := `
const cyclic: any = { name: "c" };
cyclic.self = cyclic;
function named() {}
console.log(cyclic, named, () => 1, Symbol("s"), { big: 1n }, "two", "words");
`
	wantResult(t, execute(t, env, 1, code, 5000), module.ExitSuccess, module.ReasonCompleted)
	want := `{"name":"c","self":"[Circular]"} [Function: named] [Function (anonymous)] Symbol(s) {"big":"1n"} two words` + "\n"
	if got := rec.Stdout(1); got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
}

func TestOutputMerges(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	code := `
cyrnel.output({ a: 1, b: { x: 1 } });
cyrnel.output({ b: 2, c: [1, "two"], d: new Date(0), e: undefined });
`
	wantResult(t, execute(t, env, 1, code, 5000), module.ExitSuccess, module.ReasonCompleted)
	want := map[string]any{"a": 1.0, "b": 2.0, "c": []any{1.0, "two"}, "d": "1970-01-01T00:00:00.000Z"}
	if got := rec.output[1]; !reflect.DeepEqual(got, want) {
		t.Errorf("output = %#v, want %#v", got, want)
	}
}

func TestOutputRejectsWhatIsNotJSON(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	code := `
const cyclic: any = {};
cyclic.self = cyclic;
for (const bad of [{ f() {} }, { s: Symbol("x") }, { n: 1n }, cyclic, [1], "str", null]) {
  try {
    cyrnel.output(bad as any);
    console.log("accepted");
  } catch (e) {
    console.log((e as Error).name);
  }
}
`
	wantResult(t, execute(t, env, 1, code, 5000), module.ExitSuccess, module.ReasonCompleted)
	if got, want := rec.Stdout(1), strings.Repeat("TypeError\n", 7); got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if len(rec.output[1]) != 0 {
		t.Errorf("output = %v, want nothing", rec.output[1])
	}
}

func TestToolInvokeResolves(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	code := `
const r = await cyrnel.services.t.tools.echo.invoke({ q: "x", n: 2, list: [1, 2], when: new Date(0) });
console.log(r.tool, r.params.q, r.params.n + 1, r.params.list.length, r.params.when);
const none = await cyrnel.services["t"].tools["echo"].invoke();
console.log(JSON.stringify(none.params));
console.log(Object.keys(cyrnel.services), Object.keys(cyrnel.services.t.tools), "t" in cyrnel.services, "x" in cyrnel.services);
console.log(cyrnel.services.t.tools.echo.description);
`
	wantResult(t, execute(t, env, 1, code, 5000), module.ExitSuccess, module.ReasonCompleted)
	want := "echo x 3 2 1970-01-01T00:00:00.000Z\n{}\n[\"t\"] [\"echo\",\"fail\",\"gather\"] true false\nReturns its call.\n"
	if got := rec.Stdout(1); got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if len(rec.calls) != 2 || rec.calls[0].Parameters["q"] != "x" || rec.calls[0].Parameters["n"] != 2.0 {
		t.Errorf("calls = %#v", rec.calls)
	}
}

func TestToolInvokeRejects(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	code := `
try {
  await cyrnel.services.t.tools.fail.invoke({});
} catch (e: any) {
  console.log(e instanceof Error, e.name, e.message, e.serviceId, e.toolId);
  console.log(e.code, e.status, JSON.stringify(e.details));
}
try {
  await cyrnel.services.t.tools.echo.invoke({ f: () => 1 } as any);
} catch (e: any) {
  console.log(e.name);
}
await cyrnel.services.t.tools.fail.invoke({});
`
	wantResult(t, execute(t, env, 1, code, 5000), module.ExitFailed, module.ReasonException)
	if got, want := rec.Stdout(1), "true ToolError upstream said no t fail\nupstream_error 502 {\"why\":\"no\"}\nTypeError\n"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if got := rec.Error(1); got != "ToolError: upstream said no" {
		t.Errorf("error = %q", got)
	}
	if stderr := rec.Stderr(1); !strings.Contains(stderr, "main.ts:13:") {
		t.Errorf("stderr does not point at the call on line 13: %q", stderr)
	}
}

func TestUnknownToolRejectsClearly(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	code := `
for (const call of [
  () => cyrnel.services.t.tools.nope.invoke({}),
  () => cyrnel.services.nope.tools.echo.invoke({}),
]) {
  try {
    await call();
  } catch (e: any) {
    console.log(e.message);
  }
}
`
	wantResult(t, execute(t, env, 1, code, 5000), module.ExitSuccess, module.ReasonCompleted)
	want := `unknown tool "nope" of service "t"; available tools: echo, fail, gather` + "\n" +
		`unknown service "nope"; available services: t` + "\n"
	if got := rec.Stdout(1); got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
}

func TestConcurrentToolCalls(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	rec.gatherN = 5
	// gather only answers once all five calls are in flight together.
	code := `
const results = await Promise.all([0, 1, 2, 3, 4].map((i) => cyrnel.services.t.tools.gather.invoke({ i })));
console.log(results);
`
	wantResult(t, execute(t, env, 1, code, 10000), module.ExitSuccess, module.ReasonCompleted)
	if got := rec.Stdout(1); got != "[0,1,2,3,4]\n" {
		t.Errorf("stdout = %q", got)
	}
}

func TestThrowReportsTypeScriptLine(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	// Types and blank lines vanish from the JavaScript; positions must not.
	code := `interface A {
  x: number;
}

type B = A | null;

function explode(a: A): never {
  throw new RangeError("boom " + a.x);
}
const b: B = { x: 1 };
explode(b!);
`
	wantResult(t, execute(t, env, 1, code, 5000), module.ExitFailed, module.ReasonException)
	if got := rec.Error(1); got != "RangeError: boom 1" {
		t.Errorf("error = %q", got)
	}
	want := "RangeError: boom 1\n    at explode (main.ts:8:9)\n    at main.ts:11:1\n"
	if got := rec.Stderr(1); got != want {
		t.Errorf("stderr = %q, want %q", got, want)
	}
}

func TestThrowNonError(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	wantResult(t, execute(t, env, 1, `throw "plain"`, 5000), module.ExitFailed, module.ReasonException)
	if got := rec.Error(1); got != `Uncaught "plain"` {
		t.Errorf("error = %q", got)
	}
}

func TestSyntaxErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, code, wantErr string
	}{
		{"unexpected token", "const a = 1;\nconst b: number = ;\n", `SyntaxError: Unexpected ";" (main.ts:2:19)`},
		{"first line", "let x = )", `SyntaxError: Unexpected ")" (main.ts:1:9)`},
		{"unclosed brace", "function f() {\n  return 1;\n", `SyntaxError: Unexpected end of file (main.ts:3:1)`},
		{"import", "const a = 1;\nimport { x } from \"y\";\n", `(main.ts:2:1)`},
		{"dynamic import", "const m = await import(\"y\");", `(main.ts:1:17)`},
		{"export", "export const a = 1;", `SyntaxError: "export" is not supported`},
	}
	env, rec := newEnv(t, nil)
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			eid := int64(i + 1)
			wantResult(t, execute(t, env, eid, c.code, 5000), module.ExitFailed, module.ReasonException)
			if got := rec.Error(eid); !strings.Contains(got, c.wantErr) {
				t.Errorf("error = %q, want it to contain %q", got, c.wantErr)
			}
			if strings.Contains(c.name, "import") && !strings.Contains(rec.Error(eid), `"import" is not supported`) {
				t.Errorf("error = %q, want the import message", rec.Error(eid))
			}
			if rec.Stderr(eid) == "" {
				t.Error("nothing on stderr")
			}
		})
	}
}

func TestDeepRecursionFailsAndNextRunSucceeds(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	code := `
function down(n: number): number { return down(n + 1) + 1; }
try {
  down(0);
} finally {
  console.log("finally is skipped: the overflow is uncatchable");
}
`
	wantResult(t, execute(t, env, 1, code, 10000), module.ExitFailed, module.ReasonException)
	if got := rec.Error(1); got != "RangeError: Maximum call stack size exceeded" {
		t.Errorf("error = %q", got)
	}
	if stderr := rec.Stderr(1); !strings.Contains(stderr, "at down (main.ts:2:") || !strings.Contains(stderr, "more\n") {
		t.Errorf("stderr = %.300q", stderr)
	}
	wantResult(t, execute(t, env, 2, `console.log("fine")`, 5000), module.ExitSuccess, module.ReasonCompleted)
	if got := rec.Stdout(2); got != "fine\n" {
		t.Errorf("stdout = %q", got)
	}
}

func TestNothingLeaksBetweenExecutions(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	first := `
(globalThis as any).leaked = 1;
var topVar = 2;
(Array.prototype as any).polluted = () => 3;
(cyrnel as any).extra = 4;
setTimeout(() => console.log("late timer"), 0);
`
	wantResult(t, execute(t, env, 1, first, 5000), module.ExitSuccess, module.ReasonCompleted)
	second := `console.log(typeof (globalThis as any).leaked, typeof (globalThis as any).topVar, typeof ([] as any).polluted, typeof (cyrnel as any).extra);`
	wantResult(t, execute(t, env, 2, second, 5000), module.ExitSuccess, module.ReasonCompleted)
	if got := rec.Stdout(2); got != "undefined undefined undefined undefined\n" {
		t.Errorf("stdout = %q", got)
	}
	if got := rec.Stdout(1); got != "" {
		t.Errorf("the first run's pending timer fired: %q", got)
	}
}

func TestUnhandledRejectionFails(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	code := `
Promise.reject(new Error("nobody listens"));
await new Promise((r) => setTimeout(r, 1));
console.log("not reached");
`
	wantResult(t, execute(t, env, 1, code, 5000), module.ExitFailed, module.ReasonException)
	if got := rec.Error(1); got != "Error: nobody listens" {
		t.Errorf("error = %q", got)
	}
	if !strings.HasPrefix(rec.Stderr(1), "Unhandled promise rejection: Error: nobody listens\n    at main.ts:2:16") {
		t.Errorf("stderr = %q", rec.Stderr(1))
	}
}

func TestAwaitingForeverFails(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	start := time.Now()
	wantResult(t, execute(t, env, 1, `await new Promise(() => {});`, 60000), module.ExitFailed, module.ReasonException)
	if time.Since(start) > 10*time.Second {
		t.Error("waited for the timeout instead of noticing nothing can settle the promise")
	}
	if !strings.Contains(rec.Error(1), "can never settle") {
		t.Errorf("error = %q", rec.Error(1))
	}
}

func TestTimersFireInOrderAndClear(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	code := `
const order: string[] = [];
await new Promise<void>((done) => {
  setTimeout(() => order.push("c"), 6);
  setTimeout((x: string) => order.push(x), 2, "b");
  const id = setTimeout(() => order.push("never"), 4);
  setTimeout(() => order.push("a"), 0);
  clearTimeout(id);
  setTimeout(done, 10);
});
console.log(order.join(""));
`
	wantResult(t, execute(t, env, 1, code, 5000), module.ExitSuccess, module.ReasonCompleted)
	if got := rec.Stdout(1); got != "abc\n" {
		t.Errorf("stdout = %q", got)
	}
}

func TestExceptionInTimerFails(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	code := `
setTimeout(() => { throw new Error("in timer"); }, 0);
await new Promise((r) => setTimeout(r, 5));
`
	wantResult(t, execute(t, env, 1, code, 5000), module.ExitFailed, module.ReasonException)
	if got := rec.Error(1); got != "Error: in timer" {
		t.Errorf("error = %q", got)
	}
}

func TestNoHostGlobals(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	code := `console.log(typeof require, typeof process, typeof fetch, typeof module, typeof setTimeout, typeof cyrnel.output);`
	wantResult(t, execute(t, env, 1, code, 5000), module.ExitSuccess, module.ReasonCompleted)
	if got := rec.Stdout(1); got != "undefined undefined undefined undefined function function\n" {
		t.Errorf("stdout = %q", got)
	}
}

func TestExecuteReportsStatesAndErrors(t *testing.T) {
	t.Parallel()
	env, rec := newEnv(t, nil)
	wantResult(t, execute(t, env, 9, `null.x`, 5000), module.ExitFailed, module.ReasonException)
	if got := rec.states[9]; !reflect.DeepEqual(got, []module.ExecState{module.StateQueued, module.StateRunning}) {
		t.Errorf("states = %v", got)
	}
	if got := rec.Error(9); !strings.HasPrefix(got, "TypeError: ") {
		t.Errorf("error = %q", got)
	}
}

func TestDefaultTimeoutFromConfig(t *testing.T) {
	t.Parallel()
	env, _ := newEnv(t, map[string]any{"timeoutMs": 30.0})
	wantResult(t, execute(t, env, 1, "while (true) {}", 0), module.ExitTimeout, module.ReasonTimeout)
}

func TestTeardownKillsAndWaits(t *testing.T) {
	t.Parallel()
	rec := newRecorder()
	env := New(nil)
	if err := env.Setup(context.Background(), module.SetupContext{Bindings: rec}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]module.Result, 3)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], _ = env.Execute(context.Background(), module.ExecutionInput{EID: int64(i + 1), Code: `console.log("up"); while (true) {}`, Options: module.Options{TimeoutMs: 60000}})
		}()
	}
	for range results {
		rec.waitFor(t, "up")
	}
	if err := env.Teardown(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for _, res := range results {
		wantResult(t, res, module.ExitCanceled, module.ReasonKilled)
	}
	if _, err := env.Execute(context.Background(), module.ExecutionInput{EID: 10, Code: "1"}); err == nil {
		t.Error("execute after teardown succeeded")
	}
}

func TestExecuteBeforeSetupFails(t *testing.T) {
	t.Parallel()
	env := New(nil)
	if _, err := env.Execute(context.Background(), module.ExecutionInput{EID: 1, Code: "1"}); err == nil {
		t.Error("execute before setup succeeded")
	}
}

func TestInfoAndConfig(t *testing.T) {
	t.Parallel()
	env := New(nil)
	info := env.Info()
	if info.ID != "typescript" || info.Type != module.TypeEnvironment || info.Version == "" || info.Name == "" || info.Description == "" {
		t.Errorf("info = %+v", info)
	}
	var schema struct {
		Properties map[string]struct {
			Default any `json:"default"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(info.ConfigSchema, &schema); err != nil {
		t.Fatalf("config schema: %v", err)
	}
	for _, k := range []string{"timeoutMs", "concurrency", "poolSize", "sandbox", "limits"} {
		if _, ok := schema.Properties[k]; !ok {
			t.Errorf("config schema lacks %s", k)
		}
	}
	if schema.Properties["timeoutMs"].Default != float64(module.DefaultTimeoutMs) {
		t.Errorf("timeoutMs default = %v", schema.Properties["timeoutMs"].Default)
	}
	if !json.Valid(info.SecretsSchema) {
		t.Error("secrets schema is not JSON")
	}

	cfg, err := ParseConfig(nil)
	if err != nil || cfg != (Config{TimeoutMs: module.DefaultTimeoutMs, Concurrency: DefaultConcurrency, PoolSize: DefaultPoolSize, Sandbox: module.DefaultSandbox, Limits: module.DefaultLimits}) {
		t.Errorf("defaults = %+v, %v", cfg, err)
	}
	for _, bad := range []map[string]any{{"concurrency": 0.0}, {"timeoutMs": -1.0}, {"limits": map[string]any{"memoryMb": 1.0}}, {"concurrency": 1.5}, {"timeoutMs": "x"}} {
		if _, err := ParseConfig(bad); err == nil {
			t.Errorf("config %v accepted", bad)
		}
	}
	if err := env.Setup(context.Background(), module.SetupContext{Config: map[string]any{"concurrency": 0.0}, Bindings: newRecorder()}); err == nil {
		t.Error("setup with a bad config succeeded")
	}
}

// TestReusedWorkersAreNotReplaced: a worker that serves one execution after
// another keeps its slot in the pool, so steady load spawns nothing. (The
// pool used to refill the slot of every worker taken, so a spawn ran every
// 20 ms under steady load and the worker coming back was thrown away.)
func TestReusedWorkersAreNotReplaced(t *testing.T) {
	t.Parallel()
	env, _ := newEnv(t, map[string]any{"poolSize": 1.0})
	pool := func() worker.Stats { return env.Status()["pool"].(worker.Stats) }
	wantResult(t, execute(t, env, 1, `1`, 5000), module.ExitSuccess, module.ReasonCompleted)
	deadline := time.Now().Add(10 * time.Second)
	for pool().Spawning > 0 { // whatever the start-up spawned has landed
		if time.Now().After(deadline) {
			t.Fatal("start-up spawns never landed")
		}
		time.Sleep(time.Millisecond)
	}
	before := pool()
	// Long enough for several refill delays to pass while a worker is out.
	start, n := time.Now(), 0
	for n < 50 || time.Since(start) < 200*time.Millisecond {
		n++
		wantResult(t, execute(t, env, int64(n+1), `const x: number = 1;`, 5000), module.ExitSuccess, module.ReasonCompleted)
	}
	after := pool()
	if after.Started != before.Started || after.Spawning != 0 {
		t.Errorf("%d executions started %d workers (%d spawning); want none", n, after.Started-before.Started, after.Spawning)
	}
	if after.Served-before.Served != int64(n) || after.Lent != 0 {
		t.Errorf("served %d, lent %d after %d executions", after.Served-before.Served, after.Lent, n)
	}
}
