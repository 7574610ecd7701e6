package approval

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/cyrnel/cyrnel/host/retention"
	"github.com/cyrnel/cyrnel/host/store"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func newManager(t *testing.T, st Store, opts Options) *Manager {
	t.Helper()
	m := New(quiet, st, nil, opts)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) }) //nolint:errcheck // it waits without a deadline
	return m
}

func request(pid int64) Request {
	return Request{PID: &pid, ServiceID: "petstore", ToolID: "getPetById", Parameters: map[string]any{"petId": 5.0}}
}

// waiting is one call blocked in Wait.
type waiting struct {
	created chan *Approval // the approval, once created
	done    chan result
}

type result struct {
	a   *Approval
	err error
}

func wait(ctx context.Context, m *Manager, req Request) *waiting {
	w := &waiting{created: make(chan *Approval, 1), done: make(chan result, 1)}
	go func() {
		a, err := m.Wait(ctx, req, func(a *Approval) { w.created <- a })
		w.done <- result{a, err}
	}()
	return w
}

func TestDecisionsWakeTheirCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ttl = time.Hour
	m := newManager(t, openStore(t), Options{TTL: ttl})
	for _, c := range []struct {
		approve bool
		want    State
	}{{true, Approved}, {false, Denied}} {
		t.Run(string(c.want), func(t *testing.T) {
			w := wait(ctx, m, request(3))
			a := <-w.created
			if State(a.State) != Pending || *a.PID != 3 || a.ToolID != "getPetById" || a.Parameters["petId"] != 5.0 {
				t.Fatalf("created: %+v", a)
			}
			if got := a.ExpiresAt.Sub(a.CreatedAt); got != ttl {
				t.Fatalf("expires %v after creation, want %v", got, ttl)
			}
			if stored, err := m.Get(ctx, a.ID); err != nil || State(stored.State) != Pending {
				t.Fatalf("stored while waiting: %+v %v", stored, err)
			}
			decided, err := m.Decide(ctx, a.ID, c.approve)
			if err != nil || State(decided.State) != c.want || decided.DecidedAt == nil {
				t.Fatalf("decide: %+v %v", decided, err)
			}
			r := <-w.done
			if r.err != nil || r.a.ID != a.ID || State(r.a.State) != c.want {
				t.Fatalf("the call got %+v %v, want %s", r.a, r.err, c.want)
			}
			for _, again := range []bool{true, false} {
				if _, err := m.Decide(ctx, a.ID, again); !errors.Is(err, ErrDecided) {
					t.Fatalf("second decision: %v", err)
				}
			}
		})
	}
	if _, err := m.Get(ctx, "apr_none"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown approval: %v", err)
	}
	if _, err := m.Decide(ctx, "apr_none", true); err == nil {
		t.Fatal("deciding an unknown approval succeeded")
	}
}

// TestExpiresAtItsDeadline: the approval expires when the manager's clock
// passes its deadline, not after TTL of real time. The clock passes it
// while the approval is being announced, before the call starts waiting.
func TestExpiresAtItsDeadline(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel() // on failure only: it would expire the approval too
	const ttl = time.Hour
	clk := clockwork.NewFakeClockAt(time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC))
	start := clk.Now()
	m := newManager(t, openStore(t), Options{TTL: ttl, Now: clk.Now})
	done := make(chan result, 1)
	go func() {
		a, err := m.Wait(ctx, request(4), func(*Approval) { clk.Advance(ttl) })
		done <- result{a, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second): // a bound on failure, never reached when the clock is honoured
		t.Fatal("the approval did not expire when the clock passed its deadline")
	}
	if r.err != nil || State(r.a.State) != Expired || r.a.DecidedAt == nil {
		t.Fatalf("after its TTL: %+v %v", r.a, r.err)
	}
	if !r.a.CreatedAt.Equal(start) || !r.a.ExpiresAt.Equal(start.Add(ttl)) || !r.a.DecidedAt.Equal(start.Add(ttl)) {
		t.Fatalf("created %v, expires %v, expired %v: want the clock's %v, +%v, +%v", r.a.CreatedAt, r.a.ExpiresAt, r.a.DecidedAt, start, ttl, ttl)
	}
	if _, err := m.Decide(ctx, r.a.ID, true); !errors.Is(err, ErrDecided) {
		t.Fatalf("approving an expired approval: %v", err)
	}
}

func TestEndOfTheCallExpiresIt(t *testing.T) {
	t.Parallel()
	m := newManager(t, openStore(t), Options{TTL: time.Hour})
	ctx, kill := context.WithCancel(context.Background())
	w := wait(ctx, m, request(5))
	a := <-w.created
	kill()
	r := <-w.done
	if r.err != nil || State(r.a.State) != Expired {
		t.Fatalf("after its call ended: %+v %v", r.a, r.err)
	}
	if stored, _ := m.Get(context.Background(), a.ID); State(stored.State) != Expired {
		t.Fatalf("stored: %+v", stored)
	}
}

func TestConcurrentCallsGetOneApprovalEach(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := newManager(t, openStore(t), Options{TTL: time.Hour})
	const n = 6
	calls := make([]*waiting, n)
	for i := range calls {
		calls[i] = wait(ctx, m, request(9))
	}
	ids := map[string]int{}
	for i, w := range calls {
		ids[(<-w.created).ID] = i
	}
	if len(ids) != n {
		t.Fatalf("%d calls got %d approvals", n, len(ids))
	}
	listed, more, err := m.List(ctx, ListInput{State: Pending, PID: 9, Limit: 100})
	if err != nil || more || len(listed) != n {
		t.Fatalf("pending: %d %v %v", len(listed), more, err)
	}
	// Decide them concurrently, every other one approved: each call gets
	// its own decision.
	var wg sync.WaitGroup
	for id, i := range ids {
		wg.Go(func() {
			if _, err := m.Decide(ctx, id, i%2 == 0); err != nil {
				t.Errorf("decide %s: %v", id, err)
			}
		})
	}
	wg.Wait()
	for id, i := range ids {
		r := <-calls[i].done
		want := map[bool]State{true: Approved, false: Denied}[i%2 == 0]
		if r.err != nil || r.a.ID != id || State(r.a.State) != want {
			t.Fatalf("call %d: %+v %v, want %s on %s", i, r.a, r.err, want, id)
		}
	}
}

func TestRecoverExpiresWhatAPreviousHostLeftPending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t)
	now := time.Now().UTC()
	left := &store.Approval{ID: newID(now), State: string(Pending), ServiceID: "s", ToolID: "t", Parameters: map[string]any{}, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}
	if err := st.InsertApproval(ctx, left); err != nil {
		t.Fatal(err)
	}
	m := newManager(t, st, Options{}) // Start recovers
	if a, _ := m.Get(ctx, left.ID); State(a.State) != Expired {
		t.Fatalf("after recovery: %+v", a)
	}
}

// signalling tells the test of each prune the manager finished; the manager
// waits until the test has heard it.
type signalling struct {
	*store.Store
	pruned chan struct{}
	quit   chan struct{}
}

func (s *signalling) PruneApprovals(ctx context.Context, keep int64, before time.Time) error {
	err := s.Store.PruneApprovals(ctx, keep, before)
	select {
	case s.pruned <- struct{}{}:
	case <-s.quit:
	}
	return err
}

func TestDecidedApprovalsArePrunedPeriodically(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &signalling{Store: openStore(t), pruned: make(chan struct{}), quit: make(chan struct{})}
	newManager(t, st, Options{Bounds: retention.Bounds{MaxRecords: 3, MaxAge: 24 * time.Hour, PruneEvery: 10 * time.Millisecond}})
	t.Cleanup(func() { close(st.quit) }) // runs before the manager's Stop
	<-st.pruned                          // the prune at start, on an empty table

	now := time.Now().UTC()
	old := now.Add(-48 * time.Hour)
	add := func(state State, at time.Time, i int) string {
		t.Helper()
		// Ids sort by creation, as the manager's do.
		a := &store.Approval{ID: newID(at.Add(time.Duration(i) * time.Millisecond)), State: string(state), ServiceID: "s", ToolID: fmt.Sprint(i),
			Parameters: map[string]any{}, CreatedAt: at, ExpiresAt: at.Add(time.Hour)}
		if state != Pending {
			a.DecidedAt = &at
		}
		if err := st.InsertApproval(ctx, a); err != nil {
			t.Fatal(err)
		}
		return a.ID
	}
	oldPending := add(Pending, old, 0)
	add(Expired, old, 1)
	add(Denied, old, 2)
	var recent []string
	for i := range 5 {
		recent = append(recent, add([]State{Approved, Denied, Expired}[i%3], now, 10+i))
	}
	// The prune that reported next may have started before the inserts;
	// the one after it started after them.
	<-st.pruned
	<-st.pruned

	rows, err := st.ListApprovals(ctx, store.ApprovalFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.ID)
	}
	// Newest first: the three newest decided, then the old pending one
	// (never pruned: a call waits on it).
	want := []string{recent[4], recent[3], recent[2], oldPending}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("after pruning:\n got %v\nwant %v", got, want)
	}
}
