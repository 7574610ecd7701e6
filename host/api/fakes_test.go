package api

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/humatest"
)

// The fakes (here and in fakes_*_test.go) stand in for the domain packages:
// each keeps what it was asked in a field the test reads, answers from plain
// data, and returns err from every call when it is set, so a test can put
// any domain error in front of an operation and read the problem the API
// makes of it.

type fakeReadiness struct{ err error }

func (f *fakeReadiness) Ready(context.Context) error { return f.err }

// fixture is the API over a fresh set of fakes.
type fixture struct {
	procs     *fakeProcesses
	env       *fakeEnvironment
	mods      *fakeModules
	svcs      *fakeServices
	tools     *fakeTools
	gate      *fakeGate
	policies  *fakePolicies
	approvals *fakeApprovals
	calls     *fakeToolCalls
	sessions  *fakeSessions
	ready     *fakeReadiness
	logs      *strings.Builder
	api       humatest.TestAPI
}

func newFixture(t *testing.T) *fixture { t.Helper(); return newFixtureWith(t, nil) }

// newFixtureWith is the API over fakes, authenticating with k (nil: no
// authentication).
func newFixtureWith(t *testing.T, k *fakeKeys) *fixture {
	t.Helper()
	f := &fixture{
		procs: &fakeProcesses{}, env: &fakeEnvironment{}, mods: &fakeModules{},
		svcs: &fakeServices{}, tools: &fakeTools{}, gate: &fakeGate{}, policies: &fakePolicies{},
		approvals: &fakeApprovals{}, calls: &fakeToolCalls{}, sessions: &fakeSessions{}, ready: &fakeReadiness{}, logs: &strings.Builder{},
	}
	d := Deps{
		Log: slog.New(slog.NewTextHandler(f.logs, nil)), Version: "test", Changes: &fakeChanges{},
		MCP:       http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusAccepted) }),
		Processes: f.procs, Environment: f.env, Modules: f.mods, Services: f.svcs, Tools: f.tools,
		Gate: f.gate, Policies: f.policies, Approvals: f.approvals, ToolCalls: f.calls, Sessions: f.sessions, Ready: f.ready,
	}
	if k != nil {
		d.Keys = k
	}
	_, a := New(d)
	f.api = humatest.Wrap(t, a)
	return f
}

// wantStatus fails unless rec has status, and decodes its JSON body into out
// (when not nil).
func wantStatus(t *testing.T, rec *httptest.ResponseRecorder, status int, out any) {
	t.Helper()
	if rec.Code != status {
		t.Fatalf("status %d, want %d: %s", rec.Code, status, rec.Body.String())
	}
	if out != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatalf("body %q: %v", rec.Body.String(), err)
		}
	}
}

// wantProblem fails unless rec is an RFC 9457 problem with status whose
// details sit at exactly locations, in order; it returns the problem.
func wantProblem(t *testing.T, rec *httptest.ResponseRecorder, status int, locations ...string) huma.ErrorModel {
	t.Helper()
	var p huma.ErrorModel
	wantStatus(t, rec, status, &p)
	if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	if p.Status != status {
		t.Errorf("problem status %d, want %d", p.Status, status)
	}
	var got []string
	for _, d := range p.Errors {
		got = append(got, d.Location)
	}
	if !slices.Equal(got, locations) {
		t.Errorf("problem locations %q, want %q (%s)", got, locations, rec.Body.String())
	}
	return p
}

// readAll is the text of a body.
func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
