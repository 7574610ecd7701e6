package gate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/audit"
	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/policy"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/services"
	"github.com/cyrnel/cyrnel/host/store"
)

const secret = "key-7f3a1c"

// tools counts the calls that got through.
type tools struct{ calls atomic.Int64 }

// Validate refuses a call without petId, as the schema of getPetById does.
func (t *tools) Validate(_ context.Context, in module.InvokeInput) error {
	if _, ok := in.Parameters["petId"]; !ok {
		return &module.ToolError{Code: module.ToolInvalidParameters,
			Err: &schema.FieldError{Field: "parameters", Message: "invalid parameters for petstore.getPetById", Problems: []schema.Problem{{Path: "/petId", Message: "missing required property"}}}}
	}
	return nil
}

func (t *tools) Invoke(_ context.Context, in module.InvokeInput) (any, error) {
	t.calls.Add(1)
	if in.Parameters["api_key"] != secret {
		return nil, fmt.Errorf("the tool got %v, not the caller's parameters", in.Parameters)
	}
	return map[string]any{"status": 200, "body": "ok"}, nil
}

// processes records suspensions and hands each approval to the test; the
// key that owns each execution is owners'.
type processes struct {
	approvals chan *approval.Approval
	owners    map[int64]string
	mu        sync.Mutex
	suspended int // suspensions not yet resumed
}

func (p *processes) Owner(pid int64) string { return p.owners[pid] }

func (p *processes) Suspend(pid int64, a any) func() {
	p.mu.Lock()
	p.suspended++
	p.mu.Unlock()
	p.approvals <- a.(*approval.Approval)
	return func() {
		p.mu.Lock()
		p.suspended--
		p.mu.Unlock()
	}
}

func (p *processes) stillSuspended() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.suspended
}

// records keeps the audit records.
type records struct {
	mu   sync.Mutex
	recs []store.ToolCall
}

func (r *records) Record(_ context.Context, c store.ToolCall) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, c)
}

func (r *records) only(t *testing.T) store.ToolCall {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.recs) != 1 {
		t.Fatalf("%d audit records, want 1: %+v", len(r.recs), r.recs)
	}
	return r.recs[0]
}

type fixture struct {
	g     *Gate
	tools *tools
	procs *processes
	audit *records
	mgr   *approval.Manager
}

// newGate builds a gate over a real store, policy engine and approval
// manager (approvals expire after ttl), with every tool of petstore under
// decision.
func newGate(t *testing.T, decision policy.Decision, ttl time.Duration) *fixture {
	t.Helper()
	ctx := context.Background()
	st, err := store.Open(ctx, "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	pol, err := policy.Load(ctx, st, control.New(slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil), policy.Allow)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pol.Put(ctx, policy.Set{Default: policy.Allow, Rules: []policy.Rule{{Pattern: "petstore.*", Decision: decision}}}); err != nil {
		t.Fatal(err)
	}
	mgr := approval.New(slog.New(slog.NewTextHandler(io.Discard, nil)), st, nil, approval.Options{TTL: ttl})
	if err := mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mgr.Stop(context.Background()) }) //nolint:errcheck // it waits without a deadline
	f := &fixture{tools: &tools{}, procs: &processes{approvals: make(chan *approval.Approval, 1)}, audit: &records{}, mgr: mgr}
	f.g = &Gate{Policies: pol, Approvals: mgr, Audit: f.audit, Processes: f.procs, Tools: f.tools}
	return f
}

func call(eid int64) module.InvokeInput {
	return module.InvokeInput{EID: eid, ServiceID: "petstore", ToolID: "getPetById", Parameters: map[string]any{"petId": 5, "api_key": secret}}
}

func wantToolError(t *testing.T, err error, code module.ToolErrorCode, is error) {
	t.Helper()
	var te *module.ToolError
	if !errors.As(err, &te) || te.Code != code || !errors.Is(err, is) {
		t.Fatalf("error %v, want a %s ToolError wrapping %v", err, code, is)
	}
}

func wantRecord(t *testing.T, rec store.ToolCall, pol policy.Decision, outcome audit.Outcome, approvalID string) {
	t.Helper()
	gotID := ""
	if rec.ApprovalID != nil {
		gotID = *rec.ApprovalID
	}
	if rec.Policy != string(pol) || audit.Outcome(rec.Outcome) != outcome || gotID != approvalID || rec.ServiceID != "petstore" || rec.ToolID != "getPetById" {
		t.Fatalf("record %+v, want policy %s, outcome %s, approval %q", rec, pol, outcome, approvalID)
	}
	if rec.Parameters["api_key"] != audit.Redacted || rec.Parameters["petId"] != 5 {
		t.Fatalf("recorded parameters %v: the secret must be redacted, the rest kept", rec.Parameters)
	}
}

func TestBlockedCallsNeverReachTheTool(t *testing.T) {
	t.Parallel()
	f := newGate(t, policy.Block, time.Hour)
	for _, src := range []Source{FromCode, FromAPI} {
		_, err := f.g.Invoke(context.Background(), src, call(1))
		wantToolError(t, err, module.ToolBlocked, ErrBlocked)
	}
	if n := f.tools.calls.Load(); n != 0 {
		t.Fatalf("a blocked call reached the tool %d times", n)
	}
	f.audit.mu.Lock()
	defer f.audit.mu.Unlock()
	if len(f.audit.recs) != 2 {
		t.Fatalf("records: %+v", f.audit.recs)
	}
	for _, rec := range f.audit.recs {
		wantRecord(t, rec, policy.Block, audit.Blocked, "")
	}
}

func TestAskOutsideAProgramNeedsAnApproval(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		src  Source
		eid  int64
	}{{"from the API", FromAPI, 0}, {"from code without a process", FromCode, 0}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newGate(t, policy.Ask, time.Hour)
			_, err := f.g.Invoke(context.Background(), c.src, call(c.eid))
			wantToolError(t, err, module.ToolBlocked, ErrNeedsApproval)
			if f.tools.calls.Load() != 0 {
				t.Fatal("the call reached the tool without an approval")
			}
			wantRecord(t, f.audit.only(t), policy.Ask, audit.Denied, "")
			if list, _, _ := f.mgr.List(context.Background(), approval.ListInput{Limit: 10}); len(list) != 0 {
				t.Fatalf("an approval nobody can wait on: %+v", list)
			}
		})
	}
}

// TestAskValidatesFirst: under ask, a call whose parameters do not fit is
// refused as invalid before any human is asked (no approval, no
// suspension); a valid one from the same program still asks (control).
func TestAskValidatesFirst(t *testing.T) {
	t.Parallel()
	f := newGate(t, policy.Ask, 2*time.Second)
	bad := call(7)
	delete(bad.Parameters, "petId")
	_, err := f.g.Invoke(context.Background(), FromCode, bad)
	var te *module.ToolError
	if !errors.As(err, &te) || te.Code != module.ToolInvalidParameters {
		t.Fatalf("error %v, want invalid_parameters", err)
	}
	if list, _, _ := f.mgr.List(context.Background(), approval.ListInput{Limit: 10}); len(list) != 0 {
		t.Fatalf("a human was asked about a call that cannot be made: %+v", list)
	}
	if f.tools.calls.Load() != 0 {
		t.Fatal("the invalid call reached the tool")
	}
	if rec := f.audit.only(t); audit.Outcome(rec.Outcome) != audit.Invalid || rec.Policy != string(policy.Ask) || rec.ApprovalID != nil {
		t.Fatalf("record: %+v", rec)
	}

	done := make(chan error, 1)
	go func() {
		_, err := f.g.Invoke(context.Background(), FromCode, call(7))
		done <- err
	}()
	a := <-f.procs.approvals
	if _, err := f.mgr.Decide(context.Background(), a.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the valid call, approved: %v", err)
	}
}

// clock counts the pauses of an execution's timeout.
type clock struct {
	mu             sync.Mutex
	paused, resume int
}

func (c *clock) counts() (paused, resumed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paused, c.resume
}

func (c *clock) pause() func() {
	c.mu.Lock()
	c.paused++
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		c.resume++
		c.mu.Unlock()
	}
}

func TestAskFromCodeWaitsForTheDecision(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		ttl     time.Duration
		decide  func(m *approval.Manager, id string) error // nil: nobody decides
		calls   int64
		outcome audit.Outcome
		state   approval.State
	}{
		{"approved", time.Hour, func(m *approval.Manager, id string) error {
			_, err := m.Decide(context.Background(), id, true)
			return err
		}, 1, audit.Success, approval.Approved},
		{"denied", time.Hour, func(m *approval.Manager, id string) error {
			_, err := m.Decide(context.Background(), id, false)
			return err
		}, 0, audit.Denied, approval.Denied},
		{"expired", 50 * time.Millisecond, nil, 0, audit.Denied, approval.Expired},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newGate(t, policy.Ask, c.ttl)
			clk := &clock{}
			ctx := module.WithPause(context.Background(), clk.pause)
			type answer struct {
				res any
				err error
			}
			done := make(chan answer, 1)
			go func() {
				res, err := f.g.Invoke(ctx, FromCode, call(7))
				done <- answer{res, err}
			}()
			a := <-f.procs.approvals
			if approval.State(a.State) != approval.Pending || a.PID == nil || *a.PID != 7 || a.Parameters["api_key"] != audit.Redacted {
				t.Fatalf("approval: %+v", a)
			}
			if paused, _ := clk.counts(); paused != 1 {
				t.Fatalf("the clock was paused %d times while suspended", paused)
			}
			if c.decide != nil {
				if err := c.decide(f.mgr, a.ID); err != nil {
					t.Fatal(err)
				}
			}
			got := <-done
			if c.state == approval.Approved {
				if got.err != nil || got.res.(map[string]any)["status"] != 200 {
					t.Fatalf("approved call: %v %v", got.res, got.err)
				}
			} else {
				wantToolError(t, got.err, module.ToolDenied, ErrDenied)
			}
			if n := f.tools.calls.Load(); n != c.calls {
				t.Fatalf("the tool was called %d times, want %d", n, c.calls)
			}
			if _, resumed := clk.counts(); f.procs.stillSuspended() != 0 || resumed != 1 {
				t.Fatalf("after the decision: %d suspensions left, clock resumed %d times", f.procs.stillSuspended(), resumed)
			}
			rec := f.audit.only(t)
			wantRecord(t, rec, policy.Ask, c.outcome, a.ID)
			if rec.PID == nil || *rec.PID != 7 || rec.Source != string(FromCode) {
				t.Fatalf("record of the call: %+v", rec)
			}
			if stored, _ := f.mgr.Get(context.Background(), a.ID); approval.State(stored.State) != c.state {
				t.Fatalf("approval after the call: %+v", stored)
			}
		})
	}
}

// lostApproval creates an approval and then fails to read it back.
type lostApproval struct{}

func (lostApproval) Wait(_ context.Context, req approval.Request, created func(*approval.Approval)) (*approval.Approval, error) {
	created(&approval.Approval{ID: "apr_lost", State: string(approval.Pending), PID: req.PID, ServiceID: req.ServiceID, ToolID: req.ToolID})
	return nil, errors.New("database gone")
}

func TestApprovalIDRecordedWhenTheApprovalCannotBeRead(t *testing.T) {
	t.Parallel()
	f := newGate(t, policy.Ask, time.Hour)
	f.g.Approvals = lostApproval{}
	_, err := f.g.Invoke(context.Background(), FromCode, call(8))
	<-f.procs.approvals
	if f.tools.calls.Load() != 0 {
		t.Fatal("a call whose approval failed reached the tool")
	}
	if f.procs.stillSuspended() != 0 {
		t.Fatal("the process stayed suspended")
	}
	wantRecord(t, f.audit.only(t), policy.Ask, audit.Denied, "apr_lost")
	// Nobody can say it was approved: the program sees it denied.
	wantToolError(t, err, module.ToolDenied, ErrDenied)
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	status := func(s int) map[string]any { return map[string]any{"status": s} }
	for _, c := range []struct {
		res     any
		err     error
		outcome audit.Outcome
		status  int // 0: none
	}{
		{status(200), nil, audit.Success, 200},
		{status(204), nil, audit.Success, 204},
		{status(404), nil, audit.UpstreamError, 404},
		{status(503), nil, audit.UpstreamError, 503},
		{"not a response", nil, audit.Success, 0},
		{nil, fmt.Errorf("x: %w", ErrBlocked), audit.Blocked, 0},
		{nil, fmt.Errorf("x: %w", ErrDenied), audit.Denied, 0},
		{nil, fmt.Errorf("x: %w", ErrNeedsApproval), audit.Denied, 0},
		{nil, &schema.FieldError{Field: "petId", Message: "required"}, audit.Invalid, 0},
		{nil, fmt.Errorf("x: %w", services.ErrNotFound), audit.Invalid, 0},
		{nil, fmt.Errorf("x: %w", services.ErrUnavailable), audit.Invalid, 0},
		{nil, errors.New("connection refused"), audit.TransportError, 0},
	} {
		got, st := outcome(c.res, c.err)
		gotStatus := 0
		if st != nil {
			gotStatus = *st
		}
		if got != c.outcome || gotStatus != c.status {
			t.Errorf("outcome(%v, %v) = %s %d, want %s %d", c.res, c.err, got, gotStatus, c.outcome, c.status)
		}
	}
}

// TestCallsCarryTheirKey: a program's call is the key's that owns its
// process, whoever the context says is asking, and so is the approval it
// waits on, which that key cannot decide; a call from the API is its
// caller's; a call without a key has none.
func TestCallsCarryTheirKey(t *testing.T) {
	t.Parallel()
	as := func(key string, role caller.Role) context.Context {
		return caller.With(context.Background(), caller.Caller{KeyID: key, Roles: []caller.Role{role}})
	}
	f := newGate(t, policy.Ask, time.Hour)
	f.procs.owners = map[int64]string{7: "key_a"}
	done := make(chan error, 1)
	go func() {
		_, err := f.g.Invoke(as("key_other", caller.Admin), FromCode, call(7))
		done <- err
	}()
	a := <-f.procs.approvals
	if a.KeyID != "key_a" {
		t.Fatalf("the approval names %q, want the process's owner", a.KeyID)
	}
	if _, err := f.mgr.Decide(as("key_a", caller.Admin), a.ID, true); !errors.Is(err, approval.ErrOwnExecution) {
		t.Fatalf("the owner decides: %v", err)
	}
	if _, err := f.mgr.Decide(as("key_approver", caller.Approver), a.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if rec := f.audit.only(t); rec.KeyID != "key_a" {
		t.Fatalf("the program's call recorded as %q's", rec.KeyID)
	}

	f = newGate(t, policy.Allow, time.Hour)
	for _, c := range []struct {
		ctx  context.Context
		want string
	}{{as("key_b", caller.Runner), "key_b"}, {context.Background(), ""}} {
		if _, err := f.g.Invoke(c.ctx, FromAPI, call(0)); err != nil {
			t.Fatal(err)
		}
		f.audit.mu.Lock()
		rec := f.audit.recs[len(f.audit.recs)-1]
		f.audit.mu.Unlock()
		if rec.KeyID != c.want {
			t.Fatalf("a call from the API recorded as %q's, want %q", rec.KeyID, c.want)
		}
	}
}
