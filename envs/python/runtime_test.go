package python

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/envtest"
	"github.com/cyrnel/cyrnel/envs/module"
)

// petTools are bindings whose ListTools describes one tool with typed
// parameters and a result schema, as the host's services do.
type petTools struct {
	*envtest.Recorder
}

var showPet = module.Tool{ServiceID: "pets", ToolID: "show", Name: "show", Description: "Show one pet.",
	InputSchema: json.RawMessage(`{"type":"object","required":["petId"],"properties":{` +
		`"petId":{"type":"integer","description":"the pet's id"},"verbose":{"type":"boolean"},"class":{"type":"string"}}}`),
}

var showPetOutput = json.RawMessage(`{"type":"object","properties":{"status":{"type":"integer"},"body":{"type":"object"}}}`)

var showPetDocs = module.ToolDocsInput{ServiceID: "pets", ToolID: "show", Description: showPet.Description, InputSchema: showPet.InputSchema, OutputSchema: showPetOutput}

func (petTools) ListTools(context.Context) ([]module.Tool, error) { return []module.Tool{showPet}, nil }

func (petTools) ToolDocsInput(_ context.Context, serviceID, toolID string) (module.ToolDocsInput, error) {
	if serviceID != "pets" || toolID != "show" {
		return module.ToolDocsInput{}, errors.New("no such tool")
	}
	return showPetDocs, nil
}

var eids atomic.Int64

// runProgram runs code in a fresh environment bound to b and returns how it
// ended and what it left.
func runProgram(t *testing.T, b module.Bindings, rec *envtest.Recorder, code string) (module.Result, envtest.Run) {
	t.Helper()
	e := New(slog.New(slog.NewTextHandler(io.Discard, nil)), testOptions)
	if err := e.Setup(context.Background(), module.SetupContext{Bindings: b, Config: map[string]any{"poolSize": 1}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Teardown(context.Background()) })
	eid := eids.Add(1)
	res, err := e.Execute(context.Background(), module.ExecutionInput{EID: eid, Code: code, Options: module.Options{TimeoutMs: 20000, OutputLimitBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	return res, rec.Get(eid)
}

func TestToolErrorSaysWhatFailed(t *testing.T) {
	t.Parallel()
	rec := envtest.NewRecorder()
	fail := func(err error) func(map[string]any) (any, error) {
		return func(map[string]any) (any, error) { return nil, err }
	}
	rec.Tools["t.invalid"] = fail(&module.ToolError{Code: module.ToolInvalidParameters,
		Details: []map[string]string{{"path": "/x", "message": "want integer"}}, Err: errors.New("invalid parameters for t.invalid")})
	rec.Tools["t.upstream"] = fail(&module.ToolError{Code: module.ToolUpstreamError, Status: 502, Err: errors.New("response too large")})
	rec.Tools["t.transport"] = fail(&module.ToolError{Code: module.ToolTransportError, Err: errors.New("connection refused")})
	rec.Tools["t.plain"] = fail(errors.New("something else"))
	res, r := runProgram(t, rec, rec, `
import asyncio
out = {}
for name in ("invalid", "upstream", "transport", "plain"):
    try:
        cyrnel.services.t.tools[name].invoke({})
    except cyrnel.ToolError as e:
        out[name] = [e.code, e.status, e.details, str(e)]
try:
    await cyrnel.services.t.upstream.aio()
except cyrnel.ToolError as e:
    out["aio"] = [e.code, e.status]
cyrnel.output(out)`)
	if res.Exit != module.ExitSuccess {
		t.Fatalf("%+v %q", res, r.Stderr)
	}
	want := map[string]any{
		"invalid":   []any{"invalid_parameters", nil, []any{map[string]any{"path": "/x", "message": "want integer"}}, "invalid parameters for t.invalid"},
		"upstream":  []any{"upstream_error", 502.0, nil, "response too large"},
		"transport": []any{"transport_error", nil, nil, "connection refused"},
		"plain":     []any{"tool_error", nil, nil, "something else"},
		"aio":       []any{"upstream_error", 502.0},
	}
	got, _ := json.Marshal(r.Output)
	exp, _ := json.Marshal(want)
	if string(got) != string(exp) {
		t.Fatalf("got  %s\nwant %s", got, exp)
	}
}

func TestTracebacksHideTheRuntime(t *testing.T) {
	t.Parallel()
	rec := envtest.NewRecorder()
	rec.Tools["t.plain"] = func(map[string]any) (any, error) { return nil, errors.New("upstream said no") }
	for name, code := range map[string]string{
		"call":  "def f():\n    cyrnel.services.t.plain()\nf()",
		"await": "async def f():\n    await cyrnel.services.t.plain.aio()\nawait f()",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			res, r := runProgram(t, rec, rec, code)
			if res.Exit != module.ExitFailed || res.Reason != module.ReasonException || len(r.Errors) != 1 || r.Errors[0] != "ToolError: upstream said no" {
				t.Fatalf("%+v %q", res, r.Errors)
			}
			stderr := string(r.Stderr)
			if !strings.Contains(stderr, `File "<process>", line 2, in f`) {
				t.Fatalf("the program's frames are missing:\n%s", stderr)
			}
			for _, leak := range []string{"cyrnel-runtime", "_tools.py", "_rpc.py", "_worker.py", "asyncio"} {
				if strings.Contains(stderr, leak) {
					t.Fatalf("runtime frame %q in the traceback:\n%s", leak, stderr)
				}
			}
		})
	}
}

func TestHelpShowsTheRenderedDocs(t *testing.T) {
	t.Parallel()
	rec := envtest.NewRecorder()
	res, r := runProgram(t, petTools{rec}, rec, `
import inspect
tool = cyrnel.services.pets.show
help(tool)
cyrnel.output({"signature": str(inspect.signature(tool)), "doc": tool.__doc__})`)
	if res.Exit != module.ExitSuccess {
		t.Fatalf("%+v %q", res, r.Stderr)
	}
	// "class" is no keyword argument in Python: invoke({...}) still takes it.
	if sig := r.Output["signature"]; sig != "(*, petId: int, verbose: bool | None = None) -> dict" {
		t.Fatalf("signature %q", sig)
	}
	e := New(slog.New(slog.NewTextHandler(io.Discard, nil)), testOptions)
	doc, err := e.ToolDocs(context.Background(), showPetDocs)
	if err != nil {
		t.Fatal(err)
	}
	if r.Output["doc"] != doc {
		t.Fatalf("__doc__ differs from the tool's docs:\n%v\n---\n%s", r.Output["doc"], doc)
	}
	if help := string(r.Stdout); !strings.Contains(help, "show(*, petId: int") || !strings.Contains(help, `"status"`) {
		t.Fatalf("help() shows no types or no result shape:\n%s", help)
	}
}

// TestPendingCallsFailAtEndOfFile drives the runtime's RPC client in a real
// interpreter over pipes the test holds, and closes the host's end while a
// call waits. The main thread's calls, on their own pipes, read their own
// answers (skipping one an interrupted call left), fail the same way, and
// go over fds 3 and 4 once their pair is broken.
func TestPendingCallsFailAtEndOfFile(t *testing.T) {
	t.Parallel()
	python, dir := runtimeOnDisk(t)
	script := `
import json, os, sys, threading
sys.path.insert(0, sys.argv[1])
from cyrnel import _rpc, _tools
host_w_r, host_w = os.pipe()  # host to runtime
rt_r, rt_w = os.pipe()        # runtime to host
call_r_host, call_w = os.pipe()  # the main thread's calls
ans_r, ans_w_host = os.pipe()    # their answers
_rpc.conn = conn = _rpc.Connection(read_fd=host_w_r, write_fd=rt_w, call_fds=(ans_r, call_w))
conn.start()
got = {}
os.write(ans_w_host, b'{"jsonrpc":"2.0","id":0,"result":"stale"}\n{"jsonrpc":"2.0","id":1,"result":42}\n')
got["direct"] = _tools._call("s", "t", {})
got["sent"] = json.loads(os.read(call_r_host, 65536))["method"]
# A forked child's calls stay off the parent's pair.
child = os.fork()
if child == 0:
    os._exit(0 if conn._direct.broken and not conn._direct.busy else 1)
got["fork"] = os.waitpid(child, 0)[1] == 0 and not conn._direct.broken
os.close(ans_w_host)
try:
    _tools._call("s", "t", {})
except _tools.ToolError as e:
    got["direct later"] = e.code
# The pair is broken: the main thread's next call goes over fds 3 and 4.
def answer_one():
    req = json.loads(os.read(rt_r, 65536))
    os.write(host_w, json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": "fallback"}).encode() + b"\n")
a = threading.Thread(target=answer_one, daemon=True)
a.start()
got["fallback"] = _tools._call("s", "t", {})
a.join(10)
def caller():
    try:
        _tools._call("s", "t", {})
    except _tools.ToolError as e:
        got["code"] = e.code
t = threading.Thread(target=caller, daemon=True)
t.start()
os.read(rt_r, 65536)  # the call is on its way: it waits for an answer
os.close(host_w)      # the host's end closes
t.join(10)
def later():
    try:
        _tools._call("s", "t", {})
    except _tools.ToolError as e:
        got["later"] = e.code
t2 = threading.Thread(target=later, daemon=True)
t2.start()
t2.join(10)
print(got.get("direct"), got.get("sent"), got.get("fork"), got.get("direct later"), got.get("fallback"), got.get("code"), t.is_alive(), got.get("later"))
`
	// A runtime that waits forever fails here instead of hanging the suite.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-I", "-S", "-c", script, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "42 invokeTool True disconnected fallback disconnected False disconnected" {
		t.Fatalf("got %q, want the main thread's call answered 42, a forked child off the pair, its later one to fail with code disconnected and the next "+
			"to go over fds 3 and 4, then the pending and the later call of other threads to fail with code disconnected", got)
	}
}

// lateCallBindings serve t.slow until the execution's context ends, then
// take a while to record that (as the host's gate expires an approval and
// audits the call), and t.ping once t.slow is under way.
type lateCallBindings struct {
	*envtest.Recorder
	entered  chan struct{}
	returned atomic.Bool
}

func (l *lateCallBindings) InvokeTool(ctx context.Context, in module.InvokeInput) (any, error) {
	switch in.ToolID {
	case "slow":
		close(l.entered)
		<-ctx.Done()
		time.Sleep(50 * time.Millisecond) // the bookkeeping of a cancelled call, not synchronisation
		l.returned.Store(true)
		return nil, ctx.Err()
	case "ping":
		<-l.entered
		return "pong", nil
	}
	return l.Recorder.InvokeTool(ctx, in)
}

// An execution's result comes after every call it made on its bindings has
// returned: a call a thread of the program left under way is cancelled when
// the program ends, and the environment waits for it, so what the host
// records of that call is recorded before the execution's end.
func TestExecutionEndsAfterItsCalls(t *testing.T) {
	t.Parallel()
	rec := envtest.NewRecorder()
	rec.Tools["t.slow"] = func(map[string]any) (any, error) { return nil, nil }
	rec.Tools["t.ping"] = func(map[string]any) (any, error) { return nil, nil }
	b := &lateCallBindings{Recorder: rec, entered: make(chan struct{})}
	res, r := runProgram(t, b, rec, `
import threading
threading.Thread(target=cyrnel.services.t.slow, daemon=True).start()
print(cyrnel.services.t.ping())`)
	if res.Exit != module.ExitSuccess || strings.TrimSpace(string(r.Stdout)) != "pong" {
		t.Fatalf("%+v %q %q", res, r.Stdout, r.Stderr)
	}
	if !b.returned.Load() {
		t.Fatal("the execution ended while a call on its bindings was still under way")
	}
}

// TestOneShotReaderStartsOnDemand guards the lazy reader thread
// (docs/protocol.md): a one-shot program runs on the only thread until a
// call answered on fd 3 needs the reader, and that call is still answered.
func TestOneShotReaderStartsOnDemand(t *testing.T) {
	t.Parallel()
	rec := envtest.NewRecorder()
	rec.Tools["t.echo"] = func(in map[string]any) (any, error) { return in, nil }
	res, r := runProgram(t, rec, rec, `
import threading
before = sorted(t.name for t in threading.enumerate())
direct = cyrnel.services.t.echo(via="fd 6")
still = sorted(t.name for t in threading.enumerate())
answered = await cyrnel.services.t.echo.aio(via="fd 3")
after = sorted(t.name for t in threading.enumerate())
cyrnel.output({"before": before, "still": still, "after": after, "direct": direct, "answered": answered})`)
	if res.Exit != module.ExitSuccess {
		t.Fatalf("%+v %q", res, r.Stderr)
	}
	got, _ := json.Marshal(r.Output)
	want := `{"after":["MainThread","cyrnel-rpc"],"answered":{"via":"fd 3"},"before":["MainThread"],"direct":{"via":"fd 6"},"still":["MainThread"]}`
	if string(got) != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

// runtimeOnDisk finds python3 and writes the embedded runtime to a
// directory removed after the test, for a script that imports its modules.
func runtimeOnDisk(t *testing.T) (python, dir string) {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("this test needs python3:", err)
	}
	dir, _, err = extractRuntime()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return python, dir
}
