package policy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/schema"
)

func newPlane(n control.Notifier, r control.Recorder) *control.Plane {
	return control.New(slog.New(slog.NewTextHandler(io.Discard, nil)), n, r)
}

// told keeps what the plane announced and recorded.
type told struct {
	mu      sync.Mutex
	events  []control.Event
	actions []string
	details []map[string]any
}

func (t *told) Notify(_ context.Context, ev control.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.events = append(t.events, ev)
}

func (t *told) Record(_ context.Context, action, target string, detail map[string]any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.actions = append(t.actions, action+" "+target)
	t.details = append(t.details, detail)
}

func TestDecideFirstMatchWins(t *testing.T) {
	t.Parallel()
	s := &Set{Default: Allow, Rules: []Rule{
		{Pattern: "github.delete*", Decision: Block},
		{Pattern: "github.*", Decision: Ask},
		{Pattern: "*.get?", Decision: Block},
	}}
	for _, c := range []struct {
		svc, tool string
		want      Decision
	}{
		{"github", "deleteRepo", Block},
		{"github", "listRepos", Ask},
		{"petstore", "getX", Block},
		{"petstore", "getXY", Allow},
		{"gitlab", "deleteRepo", Allow},
		// The dot separates service and tool: a pattern for one service does
		// not reach another whose id merely starts the same way.
		{"githubx", "listRepos", Allow},
	} {
		if got := s.Decide(c.svc, c.tool); got != c.want {
			t.Errorf("Decide(%s.%s) = %s, want %s", c.svc, c.tool, got, c.want)
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		set   Set
		field string
	}{
		{Set{Default: "maybe"}, "default"},
		{Set{Default: Allow, Rules: []Rule{{"a.*", Allow}, {"b.*", Ask}, {"[", Block}}}, "rules[2].pattern"},
		{Set{Default: Allow, Rules: []Rule{{"a.*", "yes"}}}, "rules[0].decision"},
		{Set{Default: Allow, Rules: []Rule{{"", Allow}}}, "rules[0].pattern"},
	} {
		err := c.set.Validate()
		var fe *schema.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("Validate(%+v) = %v, want a problem at %s", c.set, err, c.field)
		}
	}
}

type memSettings struct {
	mu   sync.Mutex
	m    map[string]string
	fail error // SetSetting's answer when set
}

func (s *memSettings) Setting(_ context.Context, k string) (string, bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.m[k]
	return v, ok, nil
}

func (s *memSettings) SetSetting(_ context.Context, k, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return s.fail
	}
	s.m[k] = v
	return nil
}

func TestEnginePersistsAndRejectsWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &memSettings{m: map[string]string{}}
	e, err := Load(ctx, st, newPlane(nil, nil), "")
	if err != nil {
		t.Fatal(err)
	}
	if d := e.Decide("a", "b"); d != Allow {
		t.Fatalf("default = %s, want allow", d)
	}
	if _, err := e.Put(ctx, Set{Default: Ask, Rules: []Rule{{"a.*", Block}}}); err != nil {
		t.Fatal(err)
	}
	// An invalid set changes nothing, not even its valid first rules.
	if _, err := e.Put(ctx, Set{Default: Allow, Rules: []Rule{{"x.*", Allow}, {"[", Allow}}}); err == nil {
		t.Fatal("invalid set accepted")
	}
	e2, err := Load(ctx, st, newPlane(nil, nil), Allow)
	if err != nil {
		t.Fatal(err)
	}
	if d := e2.Decide("a", "b"); d != Block {
		t.Errorf("reloaded a.b = %s, want block", d)
	}
	if d := e2.Decide("x", "y"); d != Ask {
		t.Errorf("reloaded default = %s, want ask", d)
	}
}

// A set is put through the plane: recorded and announced once stored,
// neither when refused or when storing fails, and the set in force is then
// the one before.
func TestPutGoesThroughThePlane(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &memSettings{m: map[string]string{}}
	var tl told
	e, err := Load(ctx, st, newPlane(&tl, &tl), Ask)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Put(ctx, Set{Default: Block, Rules: []Rule{{"a.*", Allow}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Put(ctx, Set{Default: "maybe"}); err == nil {
		t.Fatal("invalid set accepted")
	}
	st.mu.Lock()
	st.fail = errors.New("disk full")
	st.mu.Unlock()
	if _, err := e.Put(ctx, Set{Default: Allow}); !errors.Is(err, st.fail) {
		t.Fatalf("Put with a failing store = %v, want disk full", err)
	}
	if d := e.Decide("x", "y"); d != Block {
		t.Errorf("after a failed store the default is %s, want the stored block", d)
	}
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if len(tl.events) != 1 || tl.events[0] != (control.Event{Kind: control.KindPolicies}) {
		t.Errorf("announced %v, want one policies event", tl.events)
	}
	if len(tl.actions) != 1 || tl.actions[0] != "policies.set "+Setting || tl.details[0]["default"] != Block {
		t.Errorf("recorded %v %v, want one policies.set of the stored set", tl.actions, tl.details)
	}
}

// Another host's set is applied by Reload, through the plane: once the
// plane is stopped neither a Put nor a Reload changes the set in force.
func TestReloadAppliesTheStoredSet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &memSettings{m: map[string]string{}}
	plane := newPlane(nil, nil)
	e, err := Load(ctx, st, plane, Allow)
	if err != nil {
		t.Fatal(err)
	}
	// Nothing stored: the set in force stays.
	if err := e.Reload(ctx); err != nil || e.Decide("a", "b") != Allow {
		t.Fatalf("Reload with nothing stored = %v, decision %s", err, e.Decide("a", "b"))
	}
	other, err := Load(ctx, st, newPlane(nil, nil), Allow)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Put(ctx, Set{Default: Allow, Rules: []Rule{{"a.*", Block}}}); err != nil {
		t.Fatal(err)
	}
	if d := e.Decide("a", "b"); d != Allow {
		t.Fatalf("before Reload a.b = %s, want allow", d)
	}
	if err := e.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	if d := e.Decide("a", "b"); d != Block {
		t.Errorf("after Reload a.b = %s, want block", d)
	}
	if err := plane.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Put(ctx, Set{Default: Ask}); !errors.Is(err, control.ErrStopped) {
		t.Errorf("Put on a stopped plane = %v, want ErrStopped", err)
	}
	if _, err := other.Put(ctx, Set{Default: Ask}); err != nil {
		t.Fatal(err)
	}
	if err := e.Reload(ctx); !errors.Is(err, control.ErrStopped) || e.Decide("x", "y") != Allow {
		t.Errorf("Reload on a stopped plane = %v, default %s; want ErrStopped, allow", err, e.Decide("x", "y"))
	}
}

// A Put waits for the change under way on the plane (a module's, a
// service's): one that cannot wait changes nothing.
func TestPutWaitsForTheChangeUnderWay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := &memSettings{m: map[string]string{}}
	plane := newPlane(nil, nil)
	e, err := Load(ctx, st, plane, Allow)
	if err != nil {
		t.Fatal(err)
	}
	building, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- plane.Apply(ctx, control.Change{Event: control.Event{Kind: control.KindModule, ID: "m"}, Build: func(context.Context) error {
			close(building)
			<-release
			return nil
		}})
	}()
	<-building
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := e.Put(cancelled, Set{Default: Block}); !errors.Is(err, context.Canceled) {
		t.Errorf("Put during another change = %v, want it to wait (and give up with its context)", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if d := e.Decide("a", "b"); d != Allow || len(st.m) != 0 {
		t.Errorf("a Put that gave up changed the set: %s, stored %v", d, st.m)
	}
	if _, err := e.Put(ctx, Set{Default: Block}); err != nil || e.Decide("a", "b") != Block {
		t.Errorf("Put after the change = %v, decision %s", err, e.Decide("a", "b"))
	}
}
