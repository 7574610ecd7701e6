// Package gate governs tool calls: every call, from code, the API or MCP,
// passes the policy, waits on a human approval when the policy asks for
// one, is made, and is audited with its outcome.
package gate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/audit"
	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/policy"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/services"
	"github.com/cyrnel/cyrnel/host/store"
)

// Errors the API maps to 403.
var (
	// ErrBlocked: a policy blocks the tool.
	ErrBlocked = errors.New("blocked by tool policy")
	// ErrDenied: the approval the call needed was denied or expired.
	ErrDenied = errors.New("not approved")
	// ErrNeedsApproval: the policy asks for an approval, which only calls
	// from code can wait for.
	ErrNeedsApproval = errors.New("needs approval")
)

// Source says where a call comes from. Calls of programs MCP runs are
// calls from code.
type Source string

const (
	FromCode Source = "code"
	FromAPI  Source = "api"
)

// Sources are every source, in the order the API's spec lists them.
var Sources = []Source{FromCode, FromAPI}

// Invoker checks and makes the call: the services manager.
type Invoker interface {
	// Validate checks the call as Invoke would, without making it.
	Validate(ctx context.Context, in module.InvokeInput) error
	Invoke(ctx context.Context, in module.InvokeInput) (any, error)
}

// Processes are told about suspensions and say who owns an execution: the
// process manager.
type Processes interface {
	Suspend(pid int64, approval any) (resume func())
	// Owner is the key id that owns the live execution pid ("": none).
	Owner(pid int64) string
}

// Recorder takes audit records: the audit writer.
type Recorder interface {
	Record(ctx context.Context, c store.ToolCall)
}

// Policies decide whether a tool may be called (the policy engine).
type Policies interface {
	Decide(serviceID, toolID string) policy.Decision
}

// Approvals wait on human decisions.
type Approvals interface {
	Wait(ctx context.Context, req approval.Request, created func(*approval.Approval)) (*approval.Approval, error)
}

// Observer counts tool calls (host/metrics).
type Observer interface {
	ToolCalled(service, tool, outcome string, took time.Duration)
}

// Gate is the one path of tool calls.
type Gate struct {
	Policies  Policies
	Approvals Approvals
	Audit     Recorder
	Processes Processes
	Tools     Invoker
	Observer  Observer     // nil: not counted
	Tracer    trace.Tracer // nil: not traced
	// Now is the clock the audit records are stamped by (nil: time.Now);
	// the calls' durations are measured on time.Now's monotonic clock.
	Now func() time.Time
}

// Invoke makes a call from src. in.EID names the calling process (0: none).
// The call is the key's that owns the calling execution, or else the key
// of the caller ctx carries.
func (g *Gate) Invoke(ctx context.Context, src Source, in module.InvokeInput) (any, error) {
	start := time.Now()
	at := start
	if g.Now != nil {
		at = g.Now()
	}
	rec := store.ToolCall{At: at.UTC(), ServiceID: in.ServiceID, ToolID: in.ToolID, Source: string(src)}
	if in.EID > 0 {
		pid := in.EID
		rec.PID = &pid
		rec.KeyID = g.Processes.Owner(pid)
	} else if c, ok := caller.From(ctx); ok {
		rec.KeyID = c.KeyID
	}
	decision := g.Policies.Decide(in.ServiceID, in.ToolID)
	rec.Policy = string(decision)
	// Redacted once, up front: the record and the approval carry the same
	// copy and the adapter keeps the original.
	rec.Parameters = audit.Redact(in.Parameters)
	var span trace.Span
	if g.Tracer != nil {
		// The call's span: the upstream request (the adapter's transport)
		// and an approval wait are its children.
		ctx, span = g.Tracer.Start(ctx, "tool.call", trace.WithAttributes(
			attribute.String("cyrnel.service", in.ServiceID), attribute.String("cyrnel.tool", in.ToolID),
			attribute.String("cyrnel.source", string(src)), attribute.String("cyrnel.policy", string(decision))))
	}
	res, err := g.call(ctx, src, in, decision, &rec)
	took := time.Since(start)
	rec.DurationMs = float64(took.Microseconds()) / 1000
	o, status := outcome(res, err)
	rec.Outcome, rec.Status = string(o), status
	if g.Observer != nil {
		g.Observer.ToolCalled(in.ServiceID, in.ToolID, rec.Outcome, took)
	}
	if span != nil {
		span.SetAttributes(attribute.String("cyrnel.outcome", rec.Outcome))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, rec.Outcome)
		}
		span.End()
	}
	// The record must be queued even when the call's context ended (a kill
	// while suspended is exactly what the audit is for).
	g.Audit.Record(context.WithoutCancel(ctx), rec)
	return res, err
}

func (g *Gate) call(ctx context.Context, src Source, in module.InvokeInput, decision policy.Decision, rec *store.ToolCall) (any, error) {
	switch decision {
	case policy.Block:
		return nil, &module.ToolError{Code: module.ToolBlocked,
			Err: fmt.Errorf("tool %s.%s is blocked by the tool policy: %w", in.ServiceID, in.ToolID, ErrBlocked)}
	case policy.Ask:
		if src != FromCode || in.EID <= 0 {
			return nil, &module.ToolError{Code: module.ToolBlocked,
				Err: fmt.Errorf("tool %s.%s needs a human approval (tool policy ask); call it from code, where the call waits for one: %w",
					in.ServiceID, in.ToolID, ErrNeedsApproval)}
		}
		// A call that cannot be made is refused before a human is asked.
		if err := g.Tools.Validate(ctx, in); err != nil {
			return nil, err
		}
		if err := g.approve(ctx, in, rec); err != nil {
			return nil, err
		}
	}
	return g.Tools.Invoke(ctx, in)
}

// approve suspends the process (and its timeout) until the approval is
// decided. The record gets the approval's id as soon as it exists, so the
// audit names it even when the approval cannot be read back.
func (g *Gate) approve(ctx context.Context, in module.InvokeInput, rec *store.ToolCall) error {
	var resume, resumeClock func()
	pid := in.EID
	span := trace.SpanFromContext(ctx)
	if g.Tracer != nil {
		ctx, span = g.Tracer.Start(ctx, "approval.wait")
		defer span.End()
	}
	a, err := g.Approvals.Wait(ctx, approval.Request{PID: &pid, ServiceID: in.ServiceID, ToolID: in.ToolID, Parameters: rec.Parameters, KeyID: rec.KeyID},
		func(a *approval.Approval) {
			id := a.ID
			rec.ApprovalID = &id
			resumeClock = module.Pause(ctx)
			resume = g.Processes.Suspend(pid, a)
		})
	if resume != nil {
		resume()
		resumeClock()
	}
	if a != nil && g.Tracer != nil {
		span.SetAttributes(attribute.String("cyrnel.approval", a.ID), attribute.String("cyrnel.approval_state", a.State))
	}
	if err != nil {
		// Nobody can say it was approved: the call is not made.
		return &module.ToolError{Code: module.ToolDenied,
			Err: fmt.Errorf("tool %s.%s was not approved (the approval failed: %w): %w", in.ServiceID, in.ToolID, err, ErrDenied)}
	}
	if approval.State(a.State) != approval.Approved {
		return &module.ToolError{Code: module.ToolDenied,
			Err: fmt.Errorf("tool %s.%s was not approved (approval %s %s): %w", in.ServiceID, in.ToolID, a.ID, a.State, ErrDenied)}
	}
	return nil
}

// outcome classifies a finished call for the audit.
func outcome(res any, err error) (audit.Outcome, *int) {
	var fe *schema.FieldError
	switch {
	case err == nil:
	case errors.Is(err, ErrBlocked):
		return audit.Blocked, nil
	case errors.Is(err, ErrDenied), errors.Is(err, ErrNeedsApproval):
		return audit.Denied, nil
	case errors.As(err, &fe), errors.Is(err, services.ErrNotFound), errors.Is(err, services.ErrUnavailable):
		return audit.Invalid, nil
	default:
		return audit.TransportError, nil
	}
	if m, ok := res.(map[string]any); ok {
		if s, ok := m["status"].(int); ok {
			if s >= 400 {
				return audit.UpstreamError, &s
			}
			return audit.Success, &s
		}
	}
	return audit.Success, nil
}
