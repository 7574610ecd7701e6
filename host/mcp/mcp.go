// Package mcp is cyrnel's Model Context Protocol endpoint (Streamable HTTP):
// tools for agents to run code in the active environment, read its docs, and
// find the tools their code can call.
package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/session"
	"github.com/cyrnel/cyrnel/host/store"
)

// Processes runs programs.
type Processes interface {
	Create(ctx context.Context, in process.CreateInput) (*process.Process, error)
	Wait(ctx context.Context, pid int64, timeout time.Duration) (*process.Process, error)
	Kill(ctx context.Context, pid int64) (*process.Process, error)
	Follow(ctx context.Context, pid int64) (replay []process.Event, next <-chan process.Event, stop func(), err error)
	Displays(ctx context.Context, pid int64) ([]process.Display, error)
}

// Sessions starts and ends sessions (nil: no session tools).
type Sessions interface {
	Create(ctx context.Context, in session.CreateInput) (*store.Session, error)
	End(ctx context.Context, id string) error
}

// Environments gives the active environment.
type Environments interface {
	Active() (module.Environment, error)
}

// Tool is a tool programs can call, as search results show it.
type Tool struct {
	ServiceID   string `json:"serviceId"`
	ToolID      string `json:"toolId"`
	Name        string `json:"name"`
	Description string `json:"description"`
	// Score is the relevance to the query (higher is better); absent
	// without a query.
	Score float64 `json:"score,omitempty"`
}

// Tools finds enabled tools and documents them for the active environment.
type Tools interface {
	// SearchTools returns up to limit enabled tools ranked by relevance to
	// a natural-language query; the first ones for a query without words.
	SearchTools(ctx context.Context, query string, limit int) ([]Tool, error)
	// ToolDocs is the Markdown the active environment writes for a tool.
	ToolDocs(ctx context.Context, serviceID, toolID string) (string, error)
}

// Deps are what the endpoint serves.
type Deps struct {
	Log          *slog.Logger
	Version      string
	Processes    Processes
	Environments Environments
	Tools        Tools
	Sessions     Sessions
}

// New returns the Streamable HTTP handler. It is stateless: each request
// gets a server built for it, so run_code's description always carries the
// docs of the environment active at that moment.
func New(d Deps) http.Handler {
	d.Log = slog.New(quiet{d.Log.Handler()})
	cache := mcp.NewSchemaCache()
	return mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		return d.server(r.Context(), cache)
	}, &mcp.StreamableHTTPOptions{Stateless: true, Logger: d.Log})
}

// quiet passes on warnings and errors only: stateless, the SDK logs a
// session's connection and disconnection at info for every request.
type quiet struct{ slog.Handler }

func (q quiet) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && q.Handler.Enabled(ctx, l)
}

func (q quiet) WithAttrs(as []slog.Attr) slog.Handler { return quiet{q.Handler.WithAttrs(as)} }

func (q quiet) WithGroup(name string) slog.Handler { return quiet{q.Handler.WithGroup(name)} }

const instructions = `cyrnel runs short programs in a sandbox. Write a program, run it with run_code, and read its structured output, stdout and stderr.
Programs reach external APIs only through tools: find them with search_tools (includeDocs shows how to call each), then call them from the program.`

func (d Deps) server(ctx context.Context, cache *mcp.SchemaCache) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "cyrnel", Version: d.Version}, &mcp.ServerOptions{
		Instructions: instructions, Logger: d.Log, SchemaCache: cache,
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	runDesc := "Run a program in cyrnel's active environment and return how it ended (exitState, reason, error), " +
		"its structured output (what it passed to cyrnel.output), stdout and stderr. " +
		"Every run starts fresh unless it names a session (create_session): a session keeps globals, imports and files between runs. " +
		"Displays (cyrnel.display(obj), figures left open, the value of a final expression) come back as images and text."
	if docs, err := d.environmentDocs(ctx); err == nil {
		runDesc += "\n\n" + docs
	} else {
		runDesc += " (The environment's guide is unavailable: " + err.Error() + ")"
	}
	mcp.AddTool(s, &mcp.Tool{Name: "run_code", Description: runDesc}, d.runCode)
	if d.Sessions != nil {
		mcp.AddTool(s, &mcp.Tool{
			Name: "create_session",
			Description: "Start a session: a long-lived interpreter whose globals, imports and working-directory files persist between the run_code calls that name it. " +
				"It ends after idleTimeoutMs without a run (default 10 min) or with end_session; a run in an ended session fails saying so.",
		}, d.createSession)
		mcp.AddTool(s, &mcp.Tool{Name: "end_session", Description: "End a session started with create_session."}, d.endSession)
	}
	mcp.AddTool(s, &mcp.Tool{
		Name:        "environment_docs",
		Description: "The guide to writing programs for run_code in the active environment (Markdown): language, globals, output, tool calls.",
	}, d.envDocs)
	mcp.AddTool(s, &mcp.Tool{
		Name: "search_tools",
		Description: "Find the tools a program can call (operations of the services registered with cyrnel). " +
			"Words of the query are matched against tool ids, names and descriptions; the best matches come first. " +
			"With includeDocs, each result carries its docs: how to call it from a program and its parameters.",
	}, d.searchTools)
	mcp.AddTool(s, &mcp.Tool{
		Name:        "tool_docs",
		Description: "How to call one tool from a program in the active environment, with its parameters and result (Markdown).",
	}, d.toolDocs)
	return s
}

func (d Deps) environmentDocs(ctx context.Context) (string, error) {
	env, err := d.Environments.Active()
	if err != nil {
		return "", err
	}
	docs, err := env.Docs(ctx)
	if err != nil {
		return "", fmt.Errorf("environment docs: %w", err)
	}
	return docs, nil
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

type createSessionInput struct {
	IdleTimeoutMs int64 `json:"idleTimeoutMs,omitempty" jsonschema:"end the session after this long without a run (default 600000)"`
}

type sessionOutput struct {
	Session string `json:"session" jsonschema:"the session id, for run_code's session"`
}

func (d Deps) createSession(ctx context.Context, _ *mcp.CallToolRequest, in createSessionInput) (*mcp.CallToolResult, sessionOutput, error) {
	row, err := d.Sessions.Create(ctx, session.CreateInput{IdleTimeoutMs: in.IdleTimeoutMs, Ref: "mcp"})
	if err != nil {
		return nil, sessionOutput{}, fmt.Errorf("create_session: %w", err)
	}
	return text("session " + row.ID + " is ready: pass it as run_code's session"), sessionOutput{Session: row.ID}, nil
}

type endSessionInput struct {
	Session string `json:"session" jsonschema:"the session id"`
}

func (d Deps) endSession(ctx context.Context, _ *mcp.CallToolRequest, in endSessionInput) (*mcp.CallToolResult, any, error) {
	if err := d.Sessions.End(ctx, in.Session); err != nil {
		return nil, nil, fmt.Errorf("end_session: %w", err)
	}
	return text("session " + in.Session + " ended"), nil, nil
}

type runInput struct {
	Session   string `json:"session,omitempty" jsonschema:"run in this session (create_session): its state persists between runs"`
	Code      string `json:"code" jsonschema:"the program"`
	TimeoutMs int64  `json:"timeoutMs,omitempty" jsonschema:"execution timeout in milliseconds (default 30000)"`
}

type runOutput struct {
	PID        int64          `json:"pid" jsonschema:"process id (GET /processes/{pid} on the HTTP API)"`
	ExitState  string         `json:"exitState" jsonschema:"success, failed, timeout or canceled"`
	Reason     string         `json:"reason" jsonschema:"why it ended: completed, exception, timeout, killed, memory_limit, output_limit, …"`
	Error      string         `json:"error,omitempty" jsonschema:"why it failed, e.g. ValueError: boom"`
	Output     map[string]any `json:"output" jsonschema:"the structured output: the merge of what the program passed to cyrnel.output"`
	Stdout     string         `json:"stdout"`
	Stderr     string         `json:"stderr"`
	DurationMs int64          `json:"durationMs"`
	// Pending: the program is suspended on these approvals (it has not
	// ended; exitState is empty).
	Pending []any `json:"pendingApprovals,omitempty" jsonschema:"approvals the program waits on: it is suspended until someone decides them"`
}

// waitGrace is how long past its own timeout a run may take to be reported
// (the environment stops it at the timeout) before it is killed.
const waitGrace = 10 * time.Second

func (d Deps) runCode(ctx context.Context, _ *mcp.CallToolRequest, in runInput) (*mcp.CallToolResult, runOutput, error) {
	if strings.TrimSpace(in.Code) == "" {
		return nil, runOutput{}, errors.New("run_code: code is empty")
	}
	p, err := d.Processes.Create(ctx, process.CreateInput{Code: in.Code, Ref: "mcp", TimeoutMs: in.TimeoutMs, Autorun: true, Session: in.Session})
	if err != nil {
		return nil, runOutput{}, fmt.Errorf("run_code: %w", argument(err))
	}
	pending, err := d.untilApproval(ctx, p.PID, time.Duration(p.TimeoutMs)*time.Millisecond+waitGrace)
	if err == nil && len(pending) > 0 {
		// This endpoint is stateless, so it cannot ask the client
		// (elicitation needs a session): say who must decide, and how.
		out := runOutput{PID: p.PID, Output: map[string]any{}, Pending: pending}
		return text(pendingText(p.PID, pending)), out, nil
	}
	if err == nil {
		p, err = d.Processes.Wait(ctx, p.PID, 0)
	}
	if err == nil && p.State != process.Idle {
		err = errors.New("the process did not end in time")
	}
	if err != nil {
		// The caller gave up (or the run hung): do not leave it running.
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, kerr := d.Processes.Kill(kctx, p.PID); kerr != nil && !errors.Is(kerr, process.ErrConflict) {
			d.Log.Warn("mcp: kill after a failed wait", "pid", p.PID, "err", kerr)
		}
		return nil, runOutput{}, fmt.Errorf("run_code: process %d: %w", p.PID, err)
	}
	out := runOutput{PID: p.PID, Error: p.Error, Output: p.Output, Stdout: p.Stdout, Stderr: p.Stderr}
	if p.ExitState != nil {
		out.ExitState = *p.ExitState
	}
	if p.Reason != nil {
		out.Reason = *p.Reason
	}
	if p.DurationMs != nil {
		out.DurationMs = *p.DurationMs
	}
	if out.Output == nil {
		out.Output = map[string]any{}
	}
	res := text(summarize(out))
	res.IsError = out.ExitState != "success"
	displays, err := d.Processes.Displays(ctx, p.PID)
	if err != nil {
		return nil, runOutput{}, fmt.Errorf("run_code: process %d: %w", p.PID, err)
	}
	res.Content = append(res.Content, displayContent(displays)...)
	return res, out, nil
}

// argument names a bad input as the tool's argument: run_code's arguments
// carry the names the process gives its fields (code, timeoutMs).
func argument(err error) error {
	var fe *schema.FieldError
	if errors.As(err, &fe) {
		return fmt.Errorf("invalid argument %w", err)
	}
	return err
}

// displayContent turns displays into MCP content: an image where the bundle
// has one, else its text.
func displayContent(ds []process.Display) []mcp.Content {
	var out []mcp.Content
	for _, disp := range ds {
		img := false
		for _, mime := range []string{"image/png", "image/jpeg"} {
			if b, err := base64.StdEncoding.DecodeString(disp.Data[mime]); err == nil && len(b) > 0 {
				out = append(out, &mcp.ImageContent{Data: b, MIMEType: mime})
				img = true
				break
			}
		}
		if t, ok := disp.Data["text/plain"]; ok && !img {
			out = append(out, &mcp.TextContent{Text: disp.Kind + ": " + t})
		}
	}
	return out
}

// untilApproval follows a process until it ends (nil) or one of its tool
// calls waits on an approval (the approvals waiting then).
func (d Deps) untilApproval(ctx context.Context, pid int64, limit time.Duration) ([]any, error) {
	replay, next, stop, err := d.Processes.Follow(ctx, pid)
	if err != nil {
		return nil, err
	}
	defer stop()
	var pending []any
	for _, ev := range replay {
		if ev.Type == process.EventApproval {
			pending = append(pending, ev.Approval)
		}
	}
	if len(pending) > 0 || next == nil {
		return pending, nil
	}
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-next:
			if !ok {
				// Ended, or this follower lagged: Wait tells which.
				p, err := d.Processes.Wait(ctx, pid, limit)
				if err != nil {
					return nil, err
				}
				if p.State == process.Idle {
					return nil, nil
				}
				return nil, errors.New("lost track of the process")
			}
			if ev.Type == process.EventApproval {
				return []any{ev.Approval}, nil
			}
		case <-timer.C:
			return nil, errors.New("the process did not end in time")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func pendingText(pid int64, pending []any) string {
	var b strings.Builder
	fmt.Fprintf(&b, "process %d is suspended: a tool call needs a human approval (tool policy ask).\n", pid)
	for _, a := range pending {
		j, _ := json.Marshal(a)
		fmt.Fprintf(&b, "approval: %s\n", j)
	}
	b.WriteString("Ask the operator to decide it: POST /approvals/{id}/approve or /deny on the HTTP API, or `cyrnel approvals approve|deny ID`. " +
		"The program then goes on (or the call raises ToolError); read its result at GET /processes/{pid}. Unanswered, the approval expires.")
	return b.String()
}

// summarize is run_code's text content, for clients that read text rather
// than structured content.
func summarize(o runOutput) string {
	var b strings.Builder
	fmt.Fprintf(&b, "exit: %s (%s)", o.ExitState, o.Reason)
	if o.Error != "" {
		fmt.Fprintf(&b, ": %s", o.Error)
	}
	if len(o.Output) > 0 {
		j, _ := json.Marshal(o.Output)
		fmt.Fprintf(&b, "\noutput: %s", j)
	}
	if o.Stdout != "" {
		fmt.Fprintf(&b, "\nstdout:\n%s", o.Stdout)
	}
	if o.Stderr != "" {
		fmt.Fprintf(&b, "\nstderr:\n%s", o.Stderr)
	}
	return b.String()
}

func (d Deps) envDocs(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
	docs, err := d.environmentDocs(ctx)
	if err != nil {
		return nil, nil, err
	}
	return text(docs), nil, nil
}

type searchInput struct {
	Query       string `json:"query,omitempty" jsonschema:"words to look for, e.g. 'pet by id'; empty lists every tool"`
	Limit       int    `json:"limit,omitempty" jsonschema:"most results to return (default 10, at most 50)"`
	IncludeDocs bool   `json:"includeDocs,omitempty" jsonschema:"include each tool's docs: how to call it and its parameters"`
}

type searchResult struct {
	Tool
	Docs string `json:"docs,omitempty" jsonschema:"how to call it from a program (with includeDocs)"`
}

type searchOutput struct {
	Tools []searchResult `json:"tools"`
}

func (d Deps) searchTools(ctx context.Context, _ *mcp.CallToolRequest, in searchInput) (*mcp.CallToolResult, searchOutput, error) {
	limit := in.Limit
	if limit <= 0 {
		limit = 10
	}
	limit = min(limit, 50)
	// The host ranks by relevance (its full-text index).
	ranked, err := d.Tools.SearchTools(ctx, in.Query, limit)
	if err != nil {
		return nil, searchOutput{}, fmt.Errorf("search_tools: %w", err)
	}
	out := searchOutput{Tools: []searchResult{}}
	for _, t := range ranked {
		r := searchResult{Tool: t}
		if in.IncludeDocs {
			docs, err := d.Tools.ToolDocs(ctx, t.ServiceID, t.ToolID)
			if err != nil {
				return nil, searchOutput{}, fmt.Errorf("search_tools: %w", err)
			}
			r.Docs = docs
		}
		out.Tools = append(out.Tools, r)
	}
	return nil, out, nil
}

type toolDocsInput struct {
	ServiceID string `json:"serviceId" jsonschema:"the tool's service id, from search_tools"`
	ToolID    string `json:"toolId" jsonschema:"the tool's id, from search_tools"`
}

func (d Deps) toolDocs(ctx context.Context, _ *mcp.CallToolRequest, in toolDocsInput) (*mcp.CallToolResult, any, error) {
	docs, err := d.Tools.ToolDocs(ctx, in.ServiceID, in.ToolID)
	if err != nil {
		return nil, nil, fmt.Errorf("tool_docs: %w", err)
	}
	return text(docs), nil, nil
}
