package typescript

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/cyrnel/cyrnel/envs/module"
)

// WorkerArg is the hidden argument that starts the binary as a TypeScript
// worker: a process that runs programs in the engine, one at a time, for the
// host that drives it over the worker protocol (docs/protocol.md).
const WorkerArg = "__cyrnel_worker_typescript"

// MaybeServeWorker serves as a TypeScript worker and exits when the binary
// was started as one; otherwise it returns at once.
func MaybeServeWorker() {
	if len(os.Args) < 2 || os.Args[1] != WorkerArg {
		return
	}
	// One program runs at a time and goja is single-threaded, so one P is
	// all a worker can use; with more, the runtime hands each request and
	// reply between threads, waking another CPU for each (a trivial
	// execution through HTTP on two vCPUs, runs interleaved with and
	// without: p50 40–190 µs lower in 7 pairs of 8). A
	// program in a tight loop still yields to the timer that interrupts it:
	// the scheduler preempts it within about 10 ms.
	runtime.GOMAXPROCS(1)
	// The host hands its pipes over in blocking mode; non-blocking, they go
	// through Go's poller, and a request wakes the goroutine that waits for
	// it rather than a thread parked in read(2) that must then hand its work
	// to another (measured: a fifth fewer context switches, 0.43 → 0.34 ms
	// for a trivial execution). If this fails they still work, only slower.
	for fd := 3; fd <= 4; fd++ {
		_ = syscall.SetNonblock(fd, true)
	}
	if err := ServeWorker(os.NewFile(3, "requests"), os.NewFile(4, "answers")); err != nil {
		fmt.Fprintln(os.Stderr, "typescript worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// ServeWorker runs the worker protocol on in (fd 3) and out (fd 4) until the
// host closes the stream (or kills the worker).
func ServeWorker(in io.ReadCloser, out io.WriteCloser) error {
	s := &workerServer{engine: NewEngine(Options{})}
	s.engine.Prepare()
	conn := jsonrpc2.NewConn(context.Background(), jsonrpc2.NewPlainObjectStream(rw{in, out}), s)
	if err := conn.Notify(context.Background(), "ready", map[string]any{"pid": os.Getpid()}); err != nil {
		return fmt.Errorf("announce ready: %w", err)
	}
	<-conn.DisconnectNotify()
	return nil
}

type rw struct {
	io.ReadCloser
	w io.WriteCloser
}

func (p rw) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p rw) Close() error                { return errors.Join(p.w.Close(), p.ReadCloser.Close()) }

type workerServer struct {
	engine *Engine
	mu     sync.Mutex
	cancel context.CancelFunc // of the program running now
}

// executeParams leaves timeoutMs out: the host's clock decides the timeout
// and sends cancel when it passes. A clock here too could not see the time
// a tool call spends waiting on a human approval, which the host's clock
// does not count (docs/typescript.md).
type executeParams struct {
	EID  int64 `json:"eid"`
	Code string
}

// Handle keeps cancel in order on the read loop; an execution runs on its
// own goroutine because its tool calls need the read loop for their answers.
func (s *workerServer) Handle(ctx context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	switch req.Method {
	case "cancel":
		s.mu.Lock()
		if s.cancel != nil {
			s.cancel()
		}
		s.mu.Unlock()
	case "execute":
		var p executeParams
		if req.Params == nil || json.Unmarshal(*req.Params, &p) != nil {
			_ = conn.ReplyWithError(ctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: "execute: bad params"})
			return
		}
		go s.execute(conn, req.ID, p)
	default:
		if !req.Notif {
			_ = conn.ReplyWithError(ctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "method not found: " + req.Method})
		}
	}
}

// maxError bounds the error text an answer carries.
const maxError = 8 << 10

// executeAnswer is the answer to execute (docs/protocol.md).
type executeAnswer struct {
	Status string `json:"status"`
	Error  string `json:"error"`
	Spent  bool   `json:"spent"`
}

func (s *workerServer) execute(conn *jsonrpc2.Conn, id jsonrpc2.ID, p executeParams) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.mu.Lock()
	s.cancel = cancel
	s.mu.Unlock()
	res := s.engine.Run(ctx, p.Code, 0, &rpcCallbacks{conn: conn})
	s.mu.Lock()
	s.cancel = nil
	s.mu.Unlock()
	status := ""
	switch {
	case res.Exit == module.ExitSuccess:
		status = "success"
	case res.Exit == module.ExitFailed && res.Reason == module.ReasonException:
		status = "failed"
	case res.Exit == module.ExitTimeout || res.Exit == module.ExitCanceled:
		// Interrupted on the host's cancel: how it ended (timeout or
		// kill) is the host's to say.
		status = "stopped"
	default:
		// The engine itself failed: an error answer, which discards this
		// worker (docs/protocol.md).
		_ = conn.ReplyWithError(context.Background(), id, &jsonrpc2.Error{Code: jsonrpc2.CodeInternalError, Message: res.Error})
		return
	}
	if len(res.Error) > maxError {
		// The answer is a message like any other, within the host's limit.
		res.Error = strings.ToValidUTF8(res.Error[:maxError], "") + "…"
	}
	_ = conn.Reply(context.Background(), id, executeAnswer{Status: status, Error: res.Error, Spent: res.Abandoned})
	// The next execution's runtime is built now, while the host records
	// this one's end, rather than on that execution's path; a spent
	// worker runs nothing more.
	if !res.Abandoned {
		s.engine.Prepare()
	}
}

// rpcCallbacks turn the engine's callbacks into protocol messages; output
// travels as notifications so it stays in order with the answer.
type rpcCallbacks struct {
	conn *jsonrpc2.Conn
}

func (c *rpcCallbacks) Stdout(p []byte) { c.stream("stdout", p) }
func (c *rpcCallbacks) Stderr(p []byte) { c.stream("stderr", p) }

// part is the bytes of output one message carries: 32 KiB as base64, within
// the allowance the host gives a message beyond the execution's output
// limit (docs/protocol.md).
const part = 24 << 10

func (c *rpcCallbacks) stream(method string, p []byte) {
	for len(p) > 0 {
		n := min(len(p), part)
		c.notify(method, map[string]any{"data": p[:n]})
		p = p[n:]
	}
}
func (c *rpcCallbacks) Output(patch map[string]any) {
	c.notify("output", map[string]any{"patch": patch})
}

func (c *rpcCallbacks) notify(method string, params any) {
	_ = c.conn.Notify(context.Background(), method, params)
}

func (c *rpcCallbacks) InvokeTool(ctx context.Context, serviceID, toolID string, params map[string]any) (any, error) {
	var out any
	err := c.conn.Call(ctx, "invokeTool", module.InvokeInput{ServiceID: serviceID, ToolID: toolID, Parameters: params}, &out)
	var rpcErr *jsonrpc2.Error
	if errors.As(err, &rpcErr) {
		// The data of a failed call says what kind of failure it was.
		te := &module.ToolError{Code: module.ToolFailed, Err: errors.New(rpcErr.Message)}
		var data struct {
			Code    module.ToolErrorCode `json:"code"`
			Status  int                  `json:"status"`
			Details any                  `json:"details"`
		}
		if rpcErr.Data != nil && json.Unmarshal(*rpcErr.Data, &data) == nil && data.Code != "" {
			te.Code, te.Status, te.Details = data.Code, data.Status, data.Details
		}
		return nil, te
	}
	return out, err
}

func (c *rpcCallbacks) ListTools(ctx context.Context) ([]module.Tool, error) {
	var out []module.Tool
	err := c.conn.Call(ctx, "listTools", map[string]any{}, &out)
	return out, err
}
