package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/schema"
)

type runInput struct {
	Session   string `json:"session,omitempty" jsonschema:"run in this session (create_session): its state persists between runs"`
	Code      string `json:"code" jsonschema:"the program"`
	TimeoutMs int64  `json:"timeoutMs,omitempty" jsonschema:"execution timeout in milliseconds (default 30000)"`
}

type runOutput struct {
	PID        int64          `json:"pid" jsonschema:"process id, for wait_process and kill_process (GET /processes/{pid} on the HTTP API)"`
	State      string         `json:"state" jsonschema:"idle: it has ended (exitState says how); suspended: it waits on the pendingApprovals; running, queued or terminating: wait_process only, when its timeout passed first"`
	ExitState  string         `json:"exitState,omitempty" jsonschema:"success, failed, timeout or canceled; absent until the program has ended (state idle)"`
	Reason     string         `json:"reason,omitempty" jsonschema:"why it ended: completed, exception, timeout, killed, memory_limit, output_limit, …"`
	Error      string         `json:"error,omitempty" jsonschema:"why it failed, e.g. ValueError: boom"`
	Output     map[string]any `json:"output" jsonschema:"the structured output: the merge of what the program passed to cyrnel.output"`
	Stdout     string         `json:"stdout"`
	Stderr     string         `json:"stderr"`
	DurationMs int64          `json:"durationMs,omitempty"`
	Pending    []any          `json:"pendingApprovals,omitempty" jsonschema:"approvals the program waits on (state suspended): once a person decides them, wait_process returns the result"`
}

// waitGrace is how long past its own timeout a run may take to be reported
// (the environment stops it at the timeout) before it is killed.
const waitGrace = 10 * time.Second

func (d Deps) runCode(ctx context.Context, req *mcp.CallToolRequest, in runInput) (*mcp.CallToolResult, runOutput, error) {
	if strings.TrimSpace(in.Code) == "" {
		return nil, runOutput{}, errors.New("run_code: code is empty")
	}
	p, err := d.create(ctx, req, process.CreateInput{Code: in.Code, Ref: "mcp", TimeoutMs: in.TimeoutMs, Autorun: true, Session: in.Session})
	if err != nil {
		return nil, runOutput{}, fmt.Errorf("run_code: %w", argument(err))
	}
	pid := p.PID
	pending, err := d.untilApproval(ctx, pid, time.Duration(p.TimeoutMs)*time.Millisecond+waitGrace)
	if err == nil && len(pending) > 0 {
		// The program is suspended, not ended: the agent gets its pid and
		// waits for the decision with wait_process.
		out := runOutput{PID: pid, State: string(process.Suspended), Output: map[string]any{}, Pending: pending}
		return text(pendingText(pid, pending)), out, nil
	}
	if err == nil {
		p, err = d.Processes.Wait(ctx, pid, 0)
	}
	if err == nil && p.State != process.Idle {
		err = errors.New("the process did not end in time")
	}
	if err != nil {
		// The caller gave up (or the run hung): do not leave it running.
		d.kill(ctx, pid)
		return nil, runOutput{}, fmt.Errorf("run_code: process %d: %w", pid, err)
	}
	return d.result(ctx, p)
}

// create creates and starts a run: here, or on the host that runs its
// session, from whose row it is then followed here as any process another
// host runs is (its approvals, its end, a kill).
func (d Deps) create(ctx context.Context, req *mcp.CallToolRequest, in process.CreateInput) (*process.Process, error) {
	host := d.sessionHost(ctx, in.Session)
	if host == "" {
		return d.Processes.Create(ctx, in)
	}
	pid, err := d.Remote.CreateProcess(ctx, host, authorization(req), in)
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", in.Session, err)
	}
	return d.Processes.Wait(ctx, pid, 0)
}

// kill stops a process whose caller is gone, even though the caller's
// context has ended.
func (d Deps) kill(ctx context.Context, pid int64) {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := d.Processes.Kill(kctx, pid); err != nil && !errors.Is(err, process.ErrConflict) {
		d.Log.Warn("mcp: kill a run its caller left", "pid", pid, "err", err)
	}
}

const waitDesc = "Wait for a program run_code started (by its pid) to end, up to timeoutMs (default 30000, at most 600000), and return it as run_code does: " +
	"state idle with exitState, output, stdout and stderr once it has ended; otherwise its state now (suspended: it still waits on an approval; running). " +
	"Use it after run_code returned state suspended: once a person approves or denies, the program goes on and wait_process returns its result. " +
	"Cancelling the wait leaves the program running (kill_process stops it)."

type waitInput struct {
	PID       int64 `json:"pid" jsonschema:"the process id run_code returned"`
	TimeoutMs int64 `json:"timeoutMs,omitempty" jsonschema:"how long to wait in milliseconds (default 30000, at most 600000)"`
}

// maxWait bounds one wait_process call; the agent calls it again to wait
// longer.
const maxWait = 10 * time.Minute

func (d Deps) waitProcess(ctx context.Context, _ *mcp.CallToolRequest, in waitInput) (*mcp.CallToolResult, runOutput, error) {
	if in.TimeoutMs < 0 {
		return nil, runOutput{}, fmt.Errorf("wait_process: invalid argument timeoutMs: %d is negative", in.TimeoutMs)
	}
	timeout := min(time.Duration(in.TimeoutMs)*time.Millisecond, maxWait)
	if in.TimeoutMs == 0 {
		timeout = 30 * time.Second
	}
	p, err := d.Processes.Wait(ctx, in.PID, timeout)
	if err != nil {
		return nil, runOutput{}, fmt.Errorf("wait_process: %w", err)
	}
	return d.result(ctx, p)
}

type killInput struct {
	PID int64 `json:"pid" jsonschema:"the process id run_code returned"`
}

func (d Deps) killProcess(ctx context.Context, _ *mcp.CallToolRequest, in killInput) (*mcp.CallToolResult, runOutput, error) {
	if _, err := d.Processes.Kill(ctx, in.PID); err != nil && !errors.Is(err, process.ErrConflict) {
		return nil, runOutput{}, fmt.Errorf("kill_process: %w", err)
	}
	p, err := d.Processes.Wait(ctx, in.PID, waitGrace)
	if err != nil {
		return nil, runOutput{}, fmt.Errorf("kill_process: %w", err)
	}
	return d.result(ctx, p)
}

// result reports a process as it is: how it ended, with its displays, or
// the state it is in.
func (d Deps) result(ctx context.Context, p *process.Process) (*mcp.CallToolResult, runOutput, error) {
	out := runOutput{PID: p.PID, State: string(p.State), Error: p.Error, Output: p.Output, Stdout: p.Stdout, Stderr: p.Stderr}
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
	if p.State != process.Idle {
		return res, out, nil
	}
	res.IsError = out.ExitState != "success"
	displays, err := d.Processes.Displays(ctx, p.PID)
	if err != nil {
		return nil, runOutput{}, fmt.Errorf("process %d: %w", p.PID, err)
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
			pending = append(pending, pendingOf(ev.Approval))
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
				return []any{pendingOf(ev.Approval)}, nil
			}
		case <-timer.C:
			return nil, errors.New("the process did not end in time")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// pendingApproval is an approval as run_code shows it, under the HTTP API's
// names.
type pendingApproval struct {
	ID         string         `json:"id"`
	State      string         `json:"state"`
	PID        *int64         `json:"pid,omitempty"`
	ServiceID  string         `json:"serviceId"`
	ToolID     string         `json:"toolId"`
	Parameters map[string]any `json:"parameters"`
	CreatedAt  time.Time      `json:"createdAt"`
	ExpiresAt  time.Time      `json:"expiresAt"`
	DecidedAt  *time.Time     `json:"decidedAt,omitempty"`
	KeyID      string         `json:"keyId,omitempty"`
	DecidedBy  string         `json:"decidedBy,omitempty"`
}

// pendingOf maps an approval event's payload (an *approval.Approval).
func pendingOf(v any) any {
	if a, ok := v.(*approval.Approval); ok {
		return pendingApproval(*a)
	}
	return v
}

func pendingText(pid int64, pending []any) string {
	var b strings.Builder
	fmt.Fprintf(&b, "process %d is suspended: a tool call needs a human approval (tool policy ask).\n", pid)
	for _, a := range pending {
		j, _ := json.Marshal(a)
		fmt.Fprintf(&b, "approval: %s\n", j)
	}
	fmt.Fprintf(&b, "Ask a person with the approver role to decide it: POST /approvals/{id}/approve or /deny on the HTTP API, or `cyrnel approvals approve|deny ID`. "+
		"The program then goes on (or the call raises ToolError): call wait_process with pid %d to get its result. Unanswered, the approval expires.", pid)
	return b.String()
}

// summarize is run_code's text content, for clients that read text rather
// than structured content.
func summarize(o runOutput) string {
	var b strings.Builder
	if o.State != string(process.Idle) {
		fmt.Fprintf(&b, "process %d is %s (it has not ended: wait_process waits for it)", o.PID, o.State)
	} else {
		fmt.Fprintf(&b, "exit: %s (%s)", o.ExitState, o.Reason)
	}
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
