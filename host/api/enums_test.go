package api

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/audit"
	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/gate"
	"github.com/cyrnel/cyrnel/host/policy"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/session"
)

func words[T ~string](vs []T) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// TestSpecEnumsAreTheDomains: every enum the spec publishes (properties,
// array items and query parameters) equals the list its domain package
// declares, in order, so a state, reason or role added to a domain cannot
// be missing from the spec or the other way round. The named types of
// enums.go build the enums from those lists; this guards that each field
// uses the right type. An enum the table does not know fails too (a new one
// needs its list named here), and so does a list no enum of the spec uses
// (a field that lost its enum type).
func TestSpecEnumsAreTheDomains(t *testing.T) {
	t.Parallel()
	states, exits, reasons := words(process.States), words(module.ExitStates), words(module.Reasons)
	decisions, outcomes := words(policy.Decisions), words(audit.Outcomes)
	approvals, roles, sessions := words(approval.States), words(caller.Roles), words(session.States)
	want := map[string][]any{
		"state": states, "exitState": exits, "reason": reasons,
		"Approval.state": approvals, "ApprovalEvent.state": approvals, "GET /approvals state": approvals,
		"Session.state": sessions, "GET /sessions state": sessions,
		"outcome": outcomes, "policy": decisions, "decision": decisions, "default": decisions,
		"roles": roles, "kind": {module.DisplayShown, module.DisplayResult}, "ModuleView.type": words(module.Types),
		"Call.source": words(gate.Sources),
		// The API's own words, with no domain behind them.
		"HealthBodyBody.status": words(healthStatuses), "ReadyBodyBody.status": words(readyStatuses),
		"GET /tools enabled": words(enabledFilters),
	}
	raw, err := Spec("json", false)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]struct {
			Parameters []struct {
				Name   string
				Schema *enumSchema
			}
		}
		Components struct{ Schemas map[string]*enumSchema }
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	check := func(where, field string, got []any) {
		if i := slices.Index(got, nil); i >= 0 {
			got = slices.Delete(slices.Clone(got), i, i+1) // nullEnums' null
		}
		key := where
		w, ok := want[key]
		if !ok {
			key = field
			w, ok = want[key]
		}
		if !ok {
			t.Errorf("%s: enum %v has no domain list in this test", where, got)
			return
		}
		seen[key] = true
		if !slices.Equal(got, w) {
			t.Errorf("%s: spec enum %v, domain list %v", where, got, w)
		}
	}
	for name, s := range doc.Components.Schemas {
		for field, p := range s.Properties {
			if p.Items != nil {
				p = p.Items
			}
			if len(p.Enum) > 0 {
				check(name+"."+field, field, p.Enum)
			}
		}
	}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			for _, p := range op.Parameters {
				if p.Schema != nil && len(p.Schema.Enum) > 0 {
					check(strings.ToUpper(method)+" "+path+" "+p.Name, p.Name, p.Schema.Enum)
				}
			}
		}
	}
	for key := range want {
		if !seen[key] {
			t.Errorf("%s: no enum in the spec (a field lost its enum type?)", key)
		}
	}
}

type enumSchema struct {
	Enum       []any                  `json:"enum"`
	Items      *enumSchema            `json:"items"`
	Properties map[string]*enumSchema `json:"properties"`
}

// TestEnumsValidate: the enums built from the domain lists reject a word
// outside them in a query, a body and an array item, naming the field, and
// accept one inside (the control).
func TestEnumsValidate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	wantProblem(t, f.api.Get("/processes?state=asleep"), http.StatusUnprocessableEntity, "query.state")
	wantProblem(t, f.api.Get("/sessions?state=asleep"), http.StatusUnprocessableEntity, "query.state")
	wantProblem(t, f.api.Get("/tool-calls?outcome=maybe"), http.StatusUnprocessableEntity, "query.outcome")
	wantProblem(t, f.api.Put("/tool-policies", map[string]any{"default": "maybe", "rules": []any{}}), http.StatusUnprocessableEntity, "body.default")
	wantProblem(t, f.api.Post("/keys", map[string]any{"name": "k", "roles": []string{"runner", "root"}}), http.StatusUnprocessableEntity, "body.roles[1]")
	// enabled takes exactly true or false: not the 1 or TRUE a bool would take.
	wantProblem(t, f.api.Get("/tools?enabled=1"), http.StatusUnprocessableEntity, "query.enabled")
	wantProblem(t, f.api.Get("/tools?enabled=TRUE"), http.StatusUnprocessableEntity, "query.enabled")
	wantStatus(t, f.api.Get("/processes?state=running"), http.StatusOK, nil)
	wantStatus(t, f.api.Get("/tools?enabled=false"), http.StatusOK, nil)
	wantStatus(t, f.api.Get("/tool-calls?outcome=denied"), http.StatusOK, nil)
}
