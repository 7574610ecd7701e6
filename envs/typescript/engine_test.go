package typescript

import (
	"context"
	"crypto/sha256"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
)

// hostCalls records an engine run's callbacks. Its stdout blocks on the
// line "block\n" until released: Go code the runtime cannot interrupt, as a
// long built-in would be.
type hostCalls struct {
	mu      sync.Mutex
	stdout  strings.Builder
	stderr  strings.Builder
	entered chan struct{}
	release chan struct{}
}

func newHostCalls() *hostCalls {
	return &hostCalls{entered: make(chan struct{}), release: make(chan struct{})}
}

func (h *hostCalls) Stdout(p []byte) {
	if string(p) == "block\n" {
		close(h.entered)
		<-h.release
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stdout.Write(p)
}

func (h *hostCalls) Stderr(p []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stderr.Write(p)
}

func (h *hostCalls) Output(map[string]any) {}

func (h *hostCalls) InvokeTool(_ context.Context, serviceID, toolID string, params map[string]any) (any, error) {
	return map[string]any{"tool": serviceID + "." + toolID, "params": params}, nil
}

func (h *hostCalls) ListTools(context.Context) ([]module.Tool, error) { return testTools, nil }

func TestEngineRunsDirectly(t *testing.T) {
	t.Parallel()
	e := NewEngine(Options{})
	h := newHostCalls()
	res := e.Run(context.Background(), `const r = await cyrnel.services.t.tools.echo.invoke({ a: 1 }); console.log(r);`, time.Second, h)
	if res != (Result{Exit: module.ExitSuccess, Reason: module.ReasonCompleted}) {
		t.Fatalf("result = %+v", res)
	}
	if got := h.stdout.String(); got != `{"params":{"a":1},"tool":"t.echo"}`+"\n" {
		t.Errorf("stdout = %q", got)
	}
}

// TestPreparedRuntimeServesOneRun: the runtime Prepare builds is the next
// run's, its console reaches that run's callbacks, and the run after gets
// a fresh one.
func TestPreparedRuntimeServesOneRun(t *testing.T) {
	t.Parallel()
	e := NewEngine(Options{})
	e.Prepare()
	spare := e.spare.Load()
	if e.Prepare(); spare == nil || e.spare.Load() != spare {
		t.Fatal("Prepare built no runtime, or replaced the one it had")
	}
	first := newHostCalls()
	if res := e.Run(context.Background(), `(globalThis as any).leaked = 1; console.log("first");`, time.Second, first); res.Exit != module.ExitSuccess {
		t.Fatalf("first run: %+v", res)
	}
	if e.spare.Load() != nil {
		t.Fatal("the first run left the prepared runtime unused")
	}
	e.Prepare()
	second := newHostCalls()
	if res := e.Run(context.Background(), `console.log(typeof (globalThis as any).leaked);`, time.Second, second); res.Exit != module.ExitSuccess {
		t.Fatalf("second run: %+v", res)
	}
	if got := first.stdout.String(); got != "first\n" {
		t.Errorf("stdout of the first run = %q", got)
	}
	if got := second.stdout.String(); got != "undefined\n" {
		t.Errorf("stdout of the second run = %q", got)
	}
}

func TestEngineKilledBeforeStart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := NewEngine(Options{}).Run(ctx, `console.log("ran")`, time.Second, newHostCalls())
	if res.Exit != module.ExitCanceled {
		t.Errorf("result = %+v", res)
	}
}

func TestEngineAbandonsUninterruptibleProgram(t *testing.T) {
	t.Parallel()
	e := NewEngine(Options{})
	h := newHostCalls()
	defer close(h.release)
	start := time.Now()
	res := e.Run(context.Background(), `console.log("block"); console.log("after");`, 50*time.Millisecond, h)
	elapsed := time.Since(start)
	if res != (Result{Exit: module.ExitTimeout, Reason: module.ReasonTimeout, Abandoned: true}) {
		t.Fatalf("result = %+v", res)
	}
	if elapsed > 5*time.Second {
		t.Errorf("Run returned after %v", elapsed)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !strings.Contains(h.stderr.String(), "abandoned") {
		t.Errorf("stderr = %q", h.stderr.String())
	}
}

func TestEngineMaxCallStackSize(t *testing.T) {
	t.Parallel()
	e := NewEngine(Options{MaxCallStackSize: 50})
	h := newHostCalls()
	code := `function depth(n: number): number { return n === 0 ? 0 : 1 + depth(n - 1); }
console.log(depth(40));
depth(60);`
	res := e.Run(context.Background(), code, time.Second, h)
	if res.Error != "RangeError: Maximum call stack size exceeded" {
		t.Errorf("result = %+v", res)
	}
	if got := h.stdout.String(); got != "40\n" {
		t.Errorf("stdout = %q", got)
	}

	// Recursion through a built-in nests Go frames as well; the same limit
	// ends it.
	res = e.Run(context.Background(), `function f(n: number): any { return [n].map(f); }
f(0);`, time.Second, newHostCalls())
	if res.Error != "RangeError: Maximum call stack size exceeded" {
		t.Errorf("result through map = %+v", res)
	}
}

func TestLoweredSyntaxRuns(t *testing.T) {
	t.Parallel()
	e := NewEngine(Options{})
	h := newHostCalls()
	code := `{
  using nothing = null;
  console.log("using ok");
}
if (false) /x/d.exec("x");
try {
  /x/d.exec("x");
} catch (e) {
  console.log((e as Error).name);
}`
	res := e.Run(context.Background(), code, time.Second, h)
	if res.Exit != module.ExitSuccess {
		t.Fatalf("result = %+v, stderr %q", res, h.stderr.String())
	}
	if got := h.stdout.String(); got != "using ok\nSyntaxError\n" {
		t.Errorf("stdout = %q", got)
	}
}

func TestEngineLimitsConcurrentToolCalls(t *testing.T) {
	t.Parallel()
	e := NewEngine(Options{MaxConcurrentToolCalls: 2})
	h := &countingHost{hostCalls: newHostCalls()}
	code := `const r = await Promise.all([1, 2, 3, 4, 5, 6].map((i) => cyrnel.services.t.tools.echo.invoke({ i })));
console.log(r.map((x: any) => x.params.i).join(","));`
	res := e.Run(context.Background(), code, 5*time.Second, h)
	if res.Exit != module.ExitSuccess {
		t.Fatalf("result = %+v", res)
	}
	if got := h.stdout.String(); got != "1,2,3,4,5,6\n" {
		t.Errorf("stdout = %q", got)
	}
	if h.peak > 2 {
		t.Errorf("%d tool calls ran at once, want at most 2", h.peak)
	}
}

type countingHost struct {
	*hostCalls
	mu        sync.Mutex
	now, peak int
}

func (c *countingHost) InvokeTool(ctx context.Context, serviceID, toolID string, params map[string]any) (any, error) {
	c.mu.Lock()
	c.now++
	c.peak = max(c.peak, c.now)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.now--
		c.mu.Unlock()
	}()
	return c.hostCalls.InvokeTool(ctx, serviceID, toolID, params)
}

func TestVLQRoundTrip(t *testing.T) {
	t.Parallel()
	for _, values := range [][]int{{0}, {1, -1, 15, -16, 16, 1000, -123456}, {0, 0, 0, 0, 0}} {
		got, err := decodeVLQ(encodeVLQ(values))
		if err != nil || !reflect.DeepEqual(got, values) {
			t.Errorf("round trip of %v = %v, %v", values, got, err)
		}
	}
	if _, err := decodeVLQ("g"); err == nil {
		t.Error("a truncated segment decoded")
	}
}

func TestShiftMappings(t *testing.T) {
	t.Parallel()
	// Line 1: the wrapper at original 0:0; line 2: two segments, the first
	// one column into the line, from original line 1.
	in := encodeVLQ([]int{0, 0, 0, 0}) + ";" + encodeVLQ([]int{2, 0, 1, 0}) + "," + encodeVLQ([]int{4, 0, 0, 3})
	got, err := shiftMappings(in)
	if err != nil {
		t.Fatal(err)
	}
	want := encodeVLQ([]int{1, 0, -1, 1}) + ";" + encodeVLQ([]int{3, 0, 1, 0}) + "," + encodeVLQ([]int{4, 0, 0, 3})
	if got != want {
		t.Errorf("shifted = %q, want %q", got, want)
	}
}

func TestProgramCacheEvictsLeastRecentlyUsed(t *testing.T) {
	t.Parallel()
	pc := newProgramCache(100)
	key := func(s string) [sha256.Size]byte { return sha256.Sum256([]byte(s)) }
	pc.add(key("a"), &compiled{cost: 40})
	pc.add(key("b"), &compiled{cost: 40})
	if _, ok := pc.get(key("a")); !ok { // a is now the most recent
		t.Fatal("a missing")
	}
	pc.add(key("c"), &compiled{cost: 40})
	if _, ok := pc.get(key("b")); ok {
		t.Error("b survived eviction")
	}
	for _, k := range []string{"a", "c"} {
		if _, ok := pc.get(key(k)); !ok {
			t.Errorf("%s was evicted", k)
		}
	}
	pc.add(key("huge"), &compiled{cost: 1000})
	if _, ok := pc.get(key("huge")); ok {
		t.Error("an entry larger than the budget was cached")
	}
}

func TestCompiledProgramsAreShared(t *testing.T) {
	t.Parallel()
	e := NewEngine(Options{})
	a, err := e.compile("const x = 1;")
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.compile("const x = 1;")
	if err != nil || a != b {
		t.Errorf("second compile was not a cache hit")
	}
}
