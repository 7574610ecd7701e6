// Package mcp is cyrnel's Model Context Protocol endpoint (Streamable HTTP):
// tools for agents to run code in the active environment, read its docs, and
// find the tools their code can call.
package mcp

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/process"
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

// Sessions starts, reads and ends sessions (nil: no session tools).
type Sessions interface {
	Create(ctx context.Context, in session.CreateInput) (*store.Session, error)
	Get(ctx context.Context, id string) (*store.Session, error)
	End(ctx context.Context, id string) error
}

// Remote reaches the sessions other hosts on the database run: a run in
// one is created on its host, which authenticates the caller's
// Authorization again, and followed here from its row.
type Remote interface {
	// Self is this host's id.
	Self() string
	// CreateProcess creates in on hostID, which runs in.Session, and
	// returns its pid.
	CreateProcess(ctx context.Context, hostID, authorization string, in process.CreateInput) (int64, error)
	// EndSession ends session id, which hostID runs.
	EndSession(ctx context.Context, hostID, authorization, id string) error
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
	// Remote, with several hosts, reaches the sessions the others run
	// (nil: this host is alone).
	Remote Remote
}

// New returns the Streamable HTTP endpoint. Its sessions end after
// o.SessionIdle without a request, with DELETE /mcp, or with Close.
func New(d Deps, o Options) *Handler {
	d.Log = slog.New(quiet{d.Log.Handler()})
	if o.MaxSessions <= 0 {
		o.MaxSessions = 256
	}
	if o.SessionIdle <= 0 {
		o.SessionIdle = 30 * time.Minute
	}
	return newHandler(d.server(), o, d.Log)
}

// quiet passes on warnings and errors only: the SDK logs every session's
// connection and disconnection at info.
type quiet struct{ slog.Handler }

func (q quiet) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && q.Handler.Enabled(ctx, l)
}

func (q quiet) WithAttrs(as []slog.Attr) slog.Handler { return quiet{q.Handler.WithAttrs(as)} }

func (q quiet) WithGroup(name string) slog.Handler { return quiet{q.Handler.WithGroup(name)} }

const instructions = `cyrnel runs short programs in a sandbox. Write a program, run it with run_code, and read its structured output, stdout and stderr.
Programs reach external APIs only through tools: find them with search_tools (includeDocs shows how to call each), then call them from the program.`

// runDesc is run_code's description: what it does and the guide of the
// environment active now.
func (d Deps) runDesc(ctx context.Context) string {
	desc := "Run a program in cyrnel's active environment and return its pid, state and, once it has ended, how it ended (exitState, reason, error), " +
		"its structured output (what it passed to cyrnel.output), stdout and stderr. " +
		"Every run starts fresh unless it names a session (create_session): a session keeps globals, imports and files between runs. " +
		"Displays (cyrnel.display(obj), figures left open, the value of a final expression) come back as images and text. " +
		"Cancelling the call (or dropping its connection) kills the program. " +
		"If a tool call of the program needs a human approval (tool policy ask), run_code returns at once with state \"suspended\", no exitState and the pending approvals: " +
		"a person decides them (HTTP API or cyrnel approvals), and wait_process with the pid returns the result."
	docs, err := d.environmentDocs(ctx)
	if err != nil {
		return desc + " (The environment's guide is unavailable: " + err.Error() + ")"
	}
	return desc + "\n\n" + docs
}

func (d Deps) server() *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "cyrnel", Version: d.Version}, &mcp.ServerOptions{
		Instructions: instructions, Logger: d.Log,
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
	})
	mcp.AddTool(s, &mcp.Tool{Name: "run_code", Description: "Run a program (the description tools/list gives carries the environment's guide)."}, d.runCode)
	mcp.AddTool(s, &mcp.Tool{Name: "wait_process", Description: waitDesc}, d.waitProcess)
	mcp.AddTool(s, &mcp.Tool{Name: "kill_process", Description: "Stop a program run_code started (by its pid) and return how it ended."}, d.killProcess)
	// The active environment can change while a session lasts: tools/list
	// describes run_code with the guide of the environment active then.
	s.AddReceivingMiddleware(d.freshRunDesc)
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

func (d Deps) freshRunDesc(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if list, ok := res.(*mcp.ListToolsResult); ok && err == nil {
			for i, t := range list.Tools {
				if t.Name == "run_code" {
					fresh := *t
					fresh.Description = d.runDesc(ctx)
					list.Tools[i] = &fresh
				}
			}
		}
		return res, err
	}
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

func (d Deps) endSession(ctx context.Context, req *mcp.CallToolRequest, in endSessionInput) (*mcp.CallToolResult, any, error) {
	end := d.Sessions.End
	if host := d.sessionHost(ctx, in.Session); host != "" {
		end = func(ctx context.Context, id string) error {
			return d.Remote.EndSession(ctx, host, authorization(req), id)
		}
	}
	if err := end(ctx, in.Session); err != nil {
		return nil, nil, fmt.Errorf("end_session: %w", err)
	}
	return text("session " + in.Session + " ended"), nil, nil
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

// sessionHost is the host that runs session id when that is another live
// one ("" when it runs here, has ended, is not the caller's to see, or
// this host is alone: the call is then answered here, as it would be).
func (d Deps) sessionHost(ctx context.Context, id string) string {
	if d.Remote == nil || d.Sessions == nil || id == "" {
		return ""
	}
	row, err := d.Sessions.Get(ctx, id)
	if err != nil || session.State(row.State) == session.Ended || row.HostID == d.Remote.Self() {
		return ""
	}
	return row.HostID
}

// authorization is the Authorization header of the HTTP request a call came
// in ("" when it had none): what a call sent to another host carries, so
// that host authenticates the same key.
func authorization(req *mcp.CallToolRequest) string {
	if extra := req.GetExtra(); extra != nil && extra.Header != nil {
		return extra.Header.Get("Authorization")
	}
	return ""
}
