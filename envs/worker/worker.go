// Package worker runs runtimes in worker processes driven over JSON-RPC 2.0:
// fds 3 and 4 carry the protocol, fds 1 and 2 are raw output pipes. It owns
// the protocol, the pool of warm workers and the execution of one program in
// one worker; environments (Python, TypeScript) supply the command to start.
package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sourcegraph/jsonrpc2"
	"golang.org/x/sync/semaphore"

	"github.com/cyrnel/cyrnel/envs/module"
)

// drainBound is how long to wait for output pipes to reach end-of-file after
// the worker is gone: only processes that escaped the kill can hold them open.
const drainBound = 500 * time.Millisecond

// Worker is one started runtime process. It serves exactly one execution, so
// nothing leaks from one program to the next.
type Worker struct {
	log     *slog.Logger
	h       Handle
	conn    *jsonrpc2.Conn
	stream  *rpcStream     // fds 3 and 4
	direct  *jsonrpc2.Conn // the main thread's calls (fds 5 and 6)
	directS *rpcStream
	ready   chan struct{}
	once    sync.Once
	// streams counts the output pipes not yet at end-of-file; the pump
	// that takes it to 0 closes eof.
	streams atomic.Int32
	eof     chan struct{} // closed when both output pipes are done
	calls   chan struct{} // one token per request being served
	outs    [2]*os.File   // parent read ends of stdout, stderr

	oomTexts    []string    // Command.OutOfMemory
	outOfMemory atomic.Bool // the runtime wrote one of oomTexts to stderr
	follow      bool        // Command.FollowHost

	cur atomic.Pointer[execution]

	// warmup keeps the tail of what the runtime printed before any
	// execution, to explain a worker that fails to start.
	warmupMu sync.Mutex
	warmup   []byte
}

const warmupTail = 4 << 10

type execution struct {
	eid int64
	b   module.Bindings
	ctx context.Context // tool calls end with the execution
	// cancel ends ctx; calls counts the host's calls on the execution's
	// bindings under way, which end() waits for once ended is set.
	cancel context.CancelFunc
	mu     sync.Mutex
	ended  bool
	calls  sync.WaitGroup
	limit  int64
	stubs  ToolStubs
	// budget holds the bytes of the params of the requests being served
	// (at most budgetSize, the execution's limit on one message).
	budget     *semaphore.Weighted
	budgetSize int64
	written    [2]atomic.Int64
	overLimit  atomic.Bool
	overWhich  atomic.Int32
}

// enter counts a call on the execution's bindings, unless it has ended.
func (e *execution) enter() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ended {
		return false
	}
	e.calls.Add(1)
	return true
}

// end cancels the calls still under way and waits until each has returned
// from the bindings: what a call records (its audit, an approval it
// expired) is recorded before the execution's result is.
func (e *execution) end() {
	e.mu.Lock()
	e.ended = true
	e.mu.Unlock()
	e.cancel()
	e.calls.Wait()
}

// Start launches a worker; ctx bounds the launch.
func Start(ctx context.Context, log *slog.Logger, l Launcher, cmd Command) (*Worker, error) {
	// pipes[i] = {read end, write end}: 0 stdout, 1 stderr, 2 requests to
	// the worker (its fd 3), 3 its answers (its fd 4), 4 answers to its main
	// thread's calls (its fd 5), 5 those calls (its fd 6).
	var pipes [6][2]*os.File
	closeAll := func() {
		for _, p := range pipes {
			for _, f := range p {
				if f != nil {
					f.Close()
				}
			}
		}
	}
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("create pipe: %w", err)
		}
		pipes[i] = [2]*os.File{r, w}
	}
	files := Files{Stdout: pipes[0][1], Stderr: pipes[1][1], ProtoIn: pipes[2][0], ProtoOut: pipes[3][1], CallIn: pipes[4][0], CallOut: pipes[5][1]}
	h, err := l.Launch(ctx, cmd, files)
	// The child has its ends now; the parent keeps only its own.
	for _, f := range append(files.Extra(), files.Stdout, files.Stderr) {
		f.Close()
	}
	if err != nil {
		for _, f := range []*os.File{pipes[0][0], pipes[1][0], pipes[2][1], pipes[3][0], pipes[4][1], pipes[5][0]} {
			f.Close()
		}
		return nil, err
	}
	w := &Worker{
		log:      log,
		h:        h,
		ready:    make(chan struct{}),
		outs:     [2]*os.File{pipes[0][0], pipes[1][0]},
		oomTexts: cmd.OutOfMemory,
	}
	if cmd.FollowHost {
		w.followHost()
	}
	// A message past the limit ends the worker at once: the host reads no
	// more of what the program writes.
	w.stream = &rpcStream{lineStream: newLineStream(pipeRW{r: pipes[3][0], w: pipes[2][1]})}
	w.directS = &rpcStream{lineStream: newLineStream(pipeRW{r: pipes[5][0], w: pipes[4][1]})}
	w.stream.tooLarge, w.directS.tooLarge = h.Kill, h.Kill
	logger := jsonrpc2.SetLogger(slog.NewLogLogger(log.Handler(), slog.LevelDebug))
	w.conn = jsonrpc2.NewConn(context.Background(), w.stream, w, logger)
	w.direct = jsonrpc2.NewConn(context.Background(), w.directS, directCalls{w}, logger)
	w.eof = make(chan struct{})
	w.calls = make(chan struct{}, maxCalls)
	w.streams.Store(2)
	go w.pump(0)
	go w.pump(1)
	return w, nil
}

// setFrameLimit bounds the messages read from now on, on both streams
// (0: maxMessage).
func (w *Worker) setFrameLimit(n int64) {
	w.stream.setLimit(n)
	w.directS.setLimit(n)
}

// pipeRW joins the two protocol pipes into one stream.
type pipeRW struct {
	r io.ReadCloser
	w io.WriteCloser
}

func (p pipeRW) Read(b []byte) (int, error)  { return p.r.Read(b) }
func (p pipeRW) Write(b []byte) (int, error) { return p.w.Write(b) }
func (p pipeRW) Close() error                { return errors.Join(p.w.Close(), p.r.Close()) }

// WaitReady waits until the runtime announced it is warm.
func (w *Worker) WaitReady(ctx context.Context) error {
	select {
	case <-w.ready:
		return nil
	case <-w.h.Done():
		w.drain()
		w.warmupMu.Lock()
		defer w.warmupMu.Unlock()
		return fmt.Errorf("worker exited before it was ready (%s): %s", w.h.Exit(), strings.TrimSpace(string(w.warmup)))
	case <-ctx.Done():
		return fmt.Errorf("worker not ready: %w", ctx.Err())
	}
}

// Done is closed when the worker's process has ended.
func (w *Worker) Done() <-chan struct{} { return w.h.Done() }

// Dead reports whether the process has ended.
func (w *Worker) Dead() bool {
	select {
	case <-w.h.Done():
		return true
	default:
		return false
	}
}

// Close kills the worker, waits for it and its output, and releases it.
func (w *Worker) Close() {
	w.h.Kill()
	<-w.h.Done()
	w.conn.Close()
	w.direct.Close()
	w.drain()
	for _, f := range w.outs {
		f.Close()
	}
}

// waitExit waits up to d for the process to end.
func (w *Worker) waitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.h.Done():
		return true
	case <-t.C:
		return false
	}
}

// waitStreams waits up to d for stdout and stderr to reach end-of-file.
func (w *Worker) waitStreams(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.eof:
		return true
	case <-t.C:
		return false
	}
}

// drain waits for the output pipes to reach end-of-file after a kill; past
// drainBound something outside the kill still holds them, so stop reading.
func (w *Worker) drain() {
	if !w.waitStreams(drainBound) {
		for _, f := range w.outs {
			f.Close()
		}
		<-w.eof
	}
}

func (w *Worker) pump(stream int) {
	defer func() {
		if w.streams.Add(-1) == 0 {
			close(w.eof)
		}
	}()
	buf := make([]byte, 32<<10)
	var carry []byte // the end of the last read, for a text split between reads
	for {
		n, err := w.outs[stream].Read(buf)
		if n > 0 {
			if stream == 1 && len(w.oomTexts) > 0 {
				carry = w.watchOutOfMemory(carry, buf[:n])
			}
			w.emit(stream, buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// watchOutOfMemory looks for the runtime's out-of-memory texts in p, read
// after carry, and returns the carry for the next read.
func (w *Worker) watchOutOfMemory(carry, p []byte) []byte {
	window := append(carry, p...)
	longest := 0
	for _, text := range w.oomTexts {
		if bytes.Contains(window, []byte(text)) {
			w.outOfMemory.Store(true)
		}
		longest = max(longest, len(text))
	}
	keep := min(len(window), longest-1)
	return append(carry[:0], window[len(window)-keep:]...)
}

func (w *Worker) emit(stream int, p []byte) {
	e := w.cur.Load()
	if e == nil {
		w.warmupMu.Lock()
		w.warmup = append(w.warmup, p...)
		if len(w.warmup) > warmupTail {
			w.warmup = w.warmup[len(w.warmup)-warmupTail:]
		}
		w.warmupMu.Unlock()
		return
	}
	if e.overLimit.Load() {
		return
	}
	total := e.written[stream].Add(int64(len(p)))
	if e.limit > 0 && total > e.limit {
		keep := int64(len(p)) - (total - e.limit)
		p = p[:max(keep, 0)]
		e.overWhich.Store(int32(stream))
		e.overLimit.Store(true)
		w.h.Kill()
	}
	if len(p) == 0 {
		return
	}
	if stream == 0 {
		e.b.EmitStdout(e.eid, p)
	} else {
		e.b.EmitStderr(e.eid, p)
	}
}

// Handle serves the worker's requests and notifications. Notifications are
// handled in order on the read loop (output patches must land before the
// execute answer that follows them); requests that call into the host run on
// their own goroutines so a slow tool never stalls the stream.
func (w *Worker) Handle(_ context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	params := w.stream.paramsOf()
	switch req.Method {
	case "ready":
		w.once.Do(func() { close(w.ready) })
		return
	case "stdout", "stderr":
		// Runtimes that serve many executions send output in the stream,
		// ordered with their answers.
		var p struct {
			Data []byte `json:"data"`
		}
		if w.cur.Load() != nil && params != nil && json.Unmarshal(params, &p) == nil {
			w.emit(map[string]int{"stdout": 0, "stderr": 1}[req.Method], p.Data)
		}
		return
	case "output":
		e := w.cur.Load()
		// The values stay JSON: decoding them would cost the host far more
		// than their bytes, and the host only stores and sends them on.
		var p struct {
			Patch map[string]json.RawMessage `json:"patch"`
		}
		if e == nil || params == nil || json.Unmarshal(params, &p) != nil || p.Patch == nil {
			return
		}
		for k, v := range p.Patch {
			// Only strings can hold invalid UTF-8 (anything else is
			// not JSON): U+FFFD for it keeps the JSON valid.
			if !utf8.Valid(v) {
				p.Patch[k] = bytes.ToValidUTF8(v, []byte("\uFFFD"))
			}
		}
		e.b.EmitOutput(e.eid, p.Patch)
		return
	case "display":
		e := w.cur.Load()
		sink, ok := module.DisplaySink(nil), false
		if e != nil {
			sink, ok = e.b.(module.DisplaySink)
		}
		var p module.Display
		if !ok || params == nil || json.Unmarshal(params, &p) != nil || p.Data == nil ||
			(p.Kind != module.DisplayShown && p.Kind != module.DisplayResult) {
			return
		}
		sink.EmitDisplay(e.eid, p)
		return
	case "file":
		e := w.cur.Load()
		sink, ok := module.FileSink(nil), false
		if e != nil {
			sink, ok = e.b.(module.FileSink)
		}
		var p struct {
			Path   string `json:"path"`
			Data   []byte `json:"data"`
			Append bool   `json:"append"`
		}
		if !ok || params == nil || json.Unmarshal(params, &p) != nil || p.Path == "" {
			return
		}
		sink.EmitFile(e.eid, p.Path, p.Data, p.Append)
		return
	}
	if !req.Notif {
		w.request(conn, req, params)
	}
}

// request serves a worker's request on its own goroutine.
func (w *Worker) request(conn *jsonrpc2.Conn, req *jsonrpc2.Request, params json.RawMessage) {
	// Taken here, on the read loop, so a flood of requests slows the worker
	// down instead of growing the host: a token per request, and the bytes
	// of its params from the execution's budget (what the host holds
	// decoded for requests in flight is bounded by the execution's limit).
	w.calls <- struct{}{}
	e := w.cur.Load() // the execution this request belongs to, not a later one
	var weight int64
	if e != nil {
		weight = min(int64(len(params)), e.budgetSize)
		if e.budget.Acquire(e.ctx, weight) != nil {
			weight = -1 // the execution ended: served with its error below
		}
	}
	go func() {
		defer func() { <-w.calls }()
		if weight > 0 {
			defer e.budget.Release(weight)
		}
		w.serve(conn, req, params, e)
	}()
}

// directCalls serves the requests of the program's main thread on its own
// pipes. That thread waits for each answer, so they are served one at a
// time on the read loop: no goroutine hand-off on a tool call's path, and a
// flood only slows the program down. Notifications belong on fds 3 and 4.
type directCalls struct{ w *Worker }

func (d directCalls) Handle(_ context.Context, conn *jsonrpc2.Conn, req *jsonrpc2.Request) {
	if !req.Notif {
		d.w.serve(conn, req, d.w.directS.paramsOf(), d.w.cur.Load())
	}
}

// maxCalls bounds the requests of one worker that the host serves at once.
const maxCalls = 64

func (w *Worker) serve(conn *jsonrpc2.Conn, req *jsonrpc2.Request, params json.RawMessage, e *execution) {
	ctx := context.Background()
	if e == nil || !e.enter() {
		_ = conn.ReplyWithError(ctx, req.ID, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidRequest, Message: "no execution in progress"})
		return
	}
	// Counted until the bindings return, not while the answer is written:
	// a program that stops reading must not hold its execution's end.
	result, err := w.call(e, req.Method, params)
	e.calls.Done()
	if err != nil {
		var rpcErr *jsonrpc2.Error
		if !errors.As(err, &rpcErr) {
			rpcErr = toolError(err)
		}
		_ = conn.ReplyWithError(ctx, req.ID, rpcErr)
		return
	}
	_ = conn.Reply(ctx, req.ID, result)
}

// CodeToolError is the JSON-RPC error code of a failed tool call.
const CodeToolError = 1

// toolErrorData is the data of a CodeToolError answer: what the runtime's
// ToolError carries besides the message.
type toolErrorData struct {
	Code    module.ToolErrorCode `json:"code"`
	Status  int                  `json:"status,omitempty"`
	Details any                  `json:"details,omitempty"`
}

// toolError carries a failed call's kind to the runtime structurally.
func toolError(err error) *jsonrpc2.Error {
	data := toolErrorData{Code: module.ToolFailed}
	var te *module.ToolError
	if errors.As(err, &te) {
		data = toolErrorData{Code: te.Code, Status: te.Status, Details: te.Details}
	}
	rpcErr := &jsonrpc2.Error{Code: CodeToolError, Message: err.Error()}
	rpcErr.SetError(data)
	return rpcErr
}

func (w *Worker) call(e *execution, method string, params json.RawMessage) (any, error) {
	if params == nil {
		params = json.RawMessage("{}")
	}
	switch method {
	case "invokeTool":
		var in module.InvokeInput
		if err := json.Unmarshal(params, &in); err != nil {
			return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: "invokeTool: " + err.Error()}
		}
		if in.Parameters == nil {
			in.Parameters = map[string]any{}
		}
		in.EID = e.eid
		return e.b.InvokeTool(e.ctx, in)
	case "listTools":
		var in struct {
			ServiceID string `json:"serviceId"`
		}
		if err := json.Unmarshal(params, &in); err != nil {
			return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: "listTools: " + err.Error()}
		}
		var tools []module.Tool
		var err error
		if st, ok := e.b.(module.ServiceTools); ok && in.ServiceID != "" {
			tools, err = st.ListServiceTools(e.ctx, in.ServiceID)
		} else {
			tools, err = e.b.ListTools(e.ctx)
		}
		if err != nil {
			return nil, err
		}
		out := make([]any, 0, len(tools))
		for _, t := range tools {
			if in.ServiceID != "" && t.ServiceID != in.ServiceID {
				continue
			}
			if e.stubs != nil {
				out = append(out, e.stubs.Stub(t))
			} else {
				out = append(out, t)
			}
		}
		return out, nil
	case "toolDocs":
		src, ok := e.b.(module.ToolDocsSource)
		if e.stubs == nil || !ok {
			break
		}
		var in struct {
			ServiceID string `json:"serviceId"`
			ToolID    string `json:"toolId"`
		}
		if err := json.Unmarshal(params, &in); err != nil {
			return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: "toolDocs: " + err.Error()}
		}
		docs, err := src.ToolDocsInput(e.ctx, in.ServiceID, in.ToolID)
		if err != nil {
			return nil, err
		}
		return e.stubs.Docs(docs), nil
	case "searchTools":
		var in struct {
			Query string `json:"query"`
			Limit int    `json:"limit"`
		}
		if err := json.Unmarshal(params, &in); err != nil {
			return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeInvalidParams, Message: "searchTools: " + err.Error()}
		}
		ts, ok := e.b.(module.ToolSearch)
		if !ok {
			return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "this host cannot search tools"}
		}
		return ts.SearchTools(e.ctx, in.Query, min(max(in.Limit, 1), 50))
	}
	return nil, &jsonrpc2.Error{Code: jsonrpc2.CodeMethodNotFound, Message: "method not found: " + method}
}
