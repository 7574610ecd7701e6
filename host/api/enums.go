package api

import (
	"github.com/danielgtaylor/huma/v2"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/audit"
	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/policy"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/session"
)

// The API's enumerated words are named types whose schema takes its enum
// from the domain package's list, so each list has one source: a state,
// reason or role added to a domain reaches the spec, the validation and the
// generated clients without an edit here. huma inlines the schema of a
// non-struct type, so the spec keeps its shape (an inline enum, no $ref).
type (
	processState  process.State
	exitState     module.ExitState
	exitReason    module.Reason
	displayKind   string
	sessionState  session.State
	callerRoles   []caller.Role
	decision      policy.Decision
	approvalState approval.State
	callOutcome   audit.Outcome
	moduleType    module.Type
)

// enumOf sets s's enum to the words of list, in the domain's order.
func enumOf[T ~string](s *huma.Schema, list []T) *huma.Schema {
	s.Enum = make([]any, len(list))
	for i, w := range list {
		s.Enum[i] = string(w)
	}
	return s
}

func (processState) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	return enumOf(s, process.States)
}

func (exitState) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	return enumOf(s, module.ExitStates)
}

func (exitReason) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	return enumOf(s, module.Reasons)
}

func (displayKind) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	return enumOf(s, []string{module.DisplayShown, module.DisplayResult})
}

func (sessionState) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	return enumOf(s, session.States)
}

func (callerRoles) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	enumOf(s.Items, caller.Roles)
	return s
}

func (decision) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	return enumOf(s, policy.Decisions)
}

func (approvalState) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	return enumOf(s, approval.States)
}

func (callOutcome) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	return enumOf(s, audit.Outcomes)
}

func (moduleType) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	return enumOf(s, module.Types)
}
