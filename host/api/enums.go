package api

import (
	"github.com/danielgtaylor/huma/v2"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/audit"
	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/gate"
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
	callSource    gate.Source
	moduleType    module.Type
)

// Words no domain has are the API's own, declared here the same way: a
// named type, its constants and their list.
type (
	// enabledFilter is GET /tools' enabled. It stays a string enum, not a
	// bool parameter, because huma parses a bool with strconv.ParseBool,
	// which would also take 1, t, TRUE and more.
	enabledFilter string
	// healthStatus is GET /health's status.
	healthStatus string
	// readyStatus is GET /health/ready's status.
	readyStatus string
)

const (
	onlyEnabled  enabledFilter = "true"
	onlyDisabled enabledFilter = "false"
	statusOK     healthStatus  = "ok"
	statusReady  readyStatus   = "ready"
)

var (
	enabledFilters = []enabledFilter{onlyEnabled, onlyDisabled}
	healthStatuses = []healthStatus{statusOK}
	readyStatuses  = []readyStatus{statusReady}
)

// wanted is the filter as the services take it: nil (absent) for every tool.
func (f enabledFilter) wanted() *bool {
	if f == "" {
		return nil
	}
	v := f == onlyEnabled
	return &v
}

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

func (callSource) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	return enumOf(s, gate.Sources)
}

func (enabledFilter) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	return enumOf(s, enabledFilters)
}

func (healthStatus) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	return enumOf(s, healthStatuses)
}

func (readyStatus) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	return enumOf(s, readyStatuses)
}

func (moduleType) TransformSchema(_ huma.Registry, s *huma.Schema) *huma.Schema {
	return enumOf(s, module.Types)
}
