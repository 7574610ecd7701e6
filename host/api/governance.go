package api

import (
	"context"
	"encoding/base64"
	"net/http"
	"strconv"

	"github.com/danielgtaylor/huma/v2"

	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/policy"
	"github.com/cyrnel/cyrnel/host/store"
)

// Rule and Set are the wire shape of policy.Rule and policy.Set.
type Rule struct {
	Pattern  string   `json:"pattern" minLength:"1" maxLength:"200" doc:"Glob on serviceId.toolId, e.g. github.* or *.delete*."`
	Decision decision `json:"decision" doc:"What a matching call gets."`
}

// Set is the whole policy: rules in order, then the default.
type Set struct {
	Default decision `json:"default" doc:"The decision when no rule matches."`
	Rules   []Rule   `json:"rules" nullable:"false" maxItems:"1000" doc:"Tried in order; the first match wins."`
}

func setOf(p *policy.Set) *Set {
	out := &Set{Default: decision(p.Default), Rules: make([]Rule, len(p.Rules))}
	for i, r := range p.Rules {
		out.Rules[i] = Rule{Pattern: r.Pattern, Decision: decision(r.Decision)}
	}
	return out
}

func (s Set) domain() policy.Set {
	out := policy.Set{Default: policy.Decision(s.Default), Rules: make([]policy.Rule, len(s.Rules))}
	for i, r := range s.Rules {
		out.Rules[i] = policy.Rule{Pattern: r.Pattern, Decision: policy.Decision(r.Decision)}
	}
	return out
}

type policyBody struct {
	Body *Set
}

type putPolicyInput struct {
	Body Set
}

type listApprovalsInput struct {
	State  approvalState `query:"state" doc:"Only approvals in this state."`
	PID    int64         `query:"pid" minimum:"1" doc:"Only approvals of this process."`
	Limit  int           `query:"limit" minimum:"1" maximum:"100" default:"20" doc:"Page size."`
	Cursor string        `query:"cursor" doc:"Opaque cursor from a previous page's nextCursor."`
}

type approvalList struct {
	Body struct {
		Items      []Approval `json:"items" nullable:"false"`
		NextCursor *string    `json:"nextCursor" nullable:"true" doc:"Pass as cursor for the next page; null on the last."`
		HasMore    bool       `json:"hasMore"`
	}
}

type approvalPath struct {
	ID string `path:"id" maxLength:"64" example:"apr_187b3c1a2f4e5d6c9a8b7c6d5e4f3a2b" doc:"Approval id."`
}

type approvalBody struct {
	Body *Approval
}

type listToolCallsInput struct {
	ServiceID string      `query:"serviceId" maxLength:"64" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" doc:"Only calls of this service."`
	ToolID    string      `query:"toolId" maxLength:"200" pattern:"^[A-Za-z_][A-Za-z0-9_]*$" doc:"Only calls of this tool."`
	PID       int64       `query:"pid" minimum:"1" doc:"Only calls of this process."`
	Outcome   callOutcome `query:"outcome" doc:"Only calls that ended so."`
	Limit     int         `query:"limit" minimum:"1" maximum:"100" default:"20" doc:"Page size."`
	Cursor    string      `query:"cursor" doc:"Opaque cursor from a previous page's nextCursor."`
}

type processToolCallsInput struct {
	PID     int64       `path:"pid" minimum:"1" example:"1" doc:"Process id."`
	Outcome callOutcome `query:"outcome" doc:"Only calls that ended so."`
	Limit   int         `query:"limit" minimum:"1" maximum:"100" default:"20" doc:"Page size."`
	Cursor  string      `query:"cursor" doc:"Opaque cursor from a previous page's nextCursor."`
}

type toolCallList struct {
	Body struct {
		Items      []Call  `json:"items" nullable:"false"`
		NextCursor *string `json:"nextCursor" nullable:"true" doc:"Pass as cursor for the next page; null on the last."`
		HasMore    bool    `json:"hasMore"`
	}
}

func badCursor(c string) error {
	return huma.Error422UnprocessableEntity("validation failed", &huma.ErrorDetail{Location: "query.cursor", Message: "not a cursor from this API", Value: c})
}

// registerToolPolicies registers reading and replacing the tool policies.
func (s *server) registerToolPolicies(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "getToolPolicies", Method: http.MethodGet, Path: "/tool-policies", Tags: []string{"tools"},
		Summary: "Get the tool policies",
	}, func(ctx context.Context, _ *struct{}) (*policyBody, error) {
		return &policyBody{setOf(s.Policies.Get())}, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "setToolPolicies", Method: http.MethodPut, Path: "/tool-policies", Tags: []string{"tools"},
		Summary: "Replace the tool policies",
		Description: "The whole ordered list at once: rules are globs on `serviceId.toolId`, tried in order, the first match deciding " +
			"(`allow`, `ask`: the call waits on a human approval, `block`); calls no rule matches get `default`. " +
			"An invalid list changes nothing. Hint: OpenAPI GET operations are read-only, so `allow` suits them where others `ask`.",
	}, func(ctx context.Context, in *putPolicyInput) (*policyBody, error) {
		set, err := s.Policies.Put(ctx, in.Body.domain())
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &policyBody{setOf(set)}, nil
	})

}

// registerApprovals registers the listing and deciding of approvals.
func (s *server) registerApprovals(api huma.API) {
	tags := []string{"approvals"}
	huma.Register(api, huma.Operation{
		OperationID: "listApprovals", Method: http.MethodGet, Path: "/approvals", Tags: tags, Summary: "List approvals, newest first",
	}, func(ctx context.Context, in *listApprovalsInput) (*approvalList, error) {
		before, ok := decodeStringCursor(in.Cursor)
		if !ok {
			return nil, badCursor(in.Cursor)
		}
		items, more, err := s.Approvals.List(ctx, approval.ListInput{State: approval.State(in.State), PID: in.PID, Before: before, Limit: in.Limit})
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		out := &approvalList{}
		out.Body.Items, out.Body.HasMore = approvalsOf(items), more
		if more {
			c := base64.RawURLEncoding.EncodeToString([]byte(items[len(items)-1].ID))
			out.Body.NextCursor = &c
		}
		return out, nil
	})

	huma.Register(api, huma.Operation{
		OperationID: "getApproval", Method: http.MethodGet, Path: "/approvals/{id}", Tags: tags, Summary: "Get an approval",
	}, func(ctx context.Context, in *approvalPath) (*approvalBody, error) {
		a, err := s.Approvals.Get(ctx, in.ID)
		if err != nil {
			return nil, s.problem(ctx, err)
		}
		return &approvalBody{approvalOf(a)}, nil
	})

	for _, d := range []struct {
		verb, id string
		approve  bool
	}{{"approve", "approveApproval", true}, {"deny", "denyApproval", false}} {
		huma.Register(api, huma.Operation{
			OperationID: d.id, Method: http.MethodPost, Path: "/approvals/{id}/" + d.verb, Tags: tags,
			Summary:     map[bool]string{true: "Approve: the waiting call goes ahead", false: "Deny: the waiting call raises ToolError"}[d.approve],
			Errors:      []int{http.StatusNotFound, http.StatusConflict},
			Description: "A decided or expired approval answers 409. The key that owns the execution that asked cannot decide it (403): another key must. The deciding key is recorded as decidedBy.",
		}, func(ctx context.Context, in *approvalPath) (*approvalBody, error) {
			a, err := s.Approvals.Decide(ctx, in.ID, d.approve)
			if err != nil {
				return nil, s.problem(ctx, err)
			}
			return &approvalBody{approvalOf(a)}, nil
		})
	}

}

// registerAudit registers the audit of tool calls, whole or per process.
func (s *server) registerAudit(api huma.API) {
	huma.Register(api, huma.Operation{
		OperationID: "listToolCalls", Method: http.MethodGet, Path: "/tool-calls", Tags: []string{"tools"},
		Summary: "The audit of tool calls, newest first",
	}, func(ctx context.Context, in *listToolCallsInput) (*toolCallList, error) {
		return s.toolCalls(ctx, in.Cursor, store.ToolCallFilter{ServiceID: in.ServiceID, ToolID: in.ToolID, PID: in.PID, Outcome: string(in.Outcome), Limit: in.Limit})
	})

	huma.Register(api, huma.Operation{
		OperationID: "listProcessToolCalls", Method: http.MethodGet, Path: "/processes/{pid}/tool-calls", Tags: []string{"processes"},
		Summary: "The tool calls of one process, newest first",
	}, func(ctx context.Context, in *processToolCallsInput) (*toolCallList, error) {
		if _, err := s.Processes.Get(ctx, in.PID); err != nil {
			return nil, s.problem(ctx, err)
		}
		return s.toolCalls(ctx, in.Cursor, store.ToolCallFilter{PID: in.PID, Outcome: string(in.Outcome), Limit: in.Limit})
	})
}

func (s *server) toolCalls(ctx context.Context, cursor string, f store.ToolCallFilter) (*toolCallList, error) {
	before, ok := decodeStringCursor(cursor)
	if !ok {
		return nil, badCursor(cursor)
	}
	if before != "" {
		id, err := strconv.ParseInt(before, 10, 64)
		if err != nil || id < 1 {
			return nil, badCursor(cursor)
		}
		f.BeforeID = id
	}
	items, more, err := s.ToolCalls.List(ctx, f)
	if err != nil {
		return nil, s.problem(ctx, err)
	}
	out := &toolCallList{}
	out.Body.Items, out.Body.HasMore = callsOf(items), more
	if more {
		c := base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(items[len(items)-1].ID, 10)))
		out.Body.NextCursor = &c
	}
	return out, nil
}

func decodeStringCursor(c string) (string, bool) {
	if c == "" {
		return "", true
	}
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil || len(b) == 0 {
		return "", false
	}
	return string(b), true
}
