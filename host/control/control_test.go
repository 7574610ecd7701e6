package control

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"testing"
)

// recorder is a notifier that keeps what it is told.
type recorder struct{ events []Event }

func (r *recorder) Notify(_ context.Context, ev Event) { r.events = append(r.events, ev) }

// steps makes a change whose every step appends its name to *log; fail
// names the step that fails.
func steps(log *[]string, fail string) Change {
	step := func(name string) func(context.Context) error {
		return func(context.Context) error {
			*log = append(*log, name)
			if name == fail {
				return errors.New(name + " failed")
			}
			return nil
		}
	}
	return Change{
		Event:    Event{Kind: KindModule, ID: "python"},
		Validate: step("validate"),
		Build:    step("build"),
		Swap:     func() { *log = append(*log, "swap") },
		Persist:  step("persist"),
		Unswap:   func() { *log = append(*log, "unswap") },
		Discard:  func(context.Context) { *log = append(*log, "discard") },
		Commit:   func(context.Context) { *log = append(*log, "commit") },
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// The steps run in order; a failure stops them and undoes exactly what ran;
// only a stored change is announced.
func TestApplyOrderAndUndo(t *testing.T) {
	t.Parallel()
	refuse := errors.New("not allowed")
	for _, c := range []struct {
		fail, policy string
		want         []string
	}{
		{"", "", []string{"validate", "build", "swap", "persist", "commit"}},
		{"validate", "", []string{"validate"}},
		{"", "refuse", []string{"validate"}},
		{"build", "", []string{"validate", "build"}},
		{"persist", "", []string{"validate", "build", "swap", "persist", "unswap", "discard"}},
	} {
		var log []string
		n := &recorder{}
		var policies []Policy
		if c.policy != "" {
			policies = append(policies, func(context.Context, *Change) error { return refuse })
		}
		err := New(quiet(), n, nil, policies...).Apply(context.Background(), steps(&log, c.fail))
		if !slices.Equal(log, c.want) {
			t.Errorf("fail %q policy %q: steps %v, want %v", c.fail, c.policy, log, c.want)
		}
		if (err == nil) != (c.fail == "" && c.policy == "") {
			t.Errorf("fail %q policy %q: err %v", c.fail, c.policy, err)
		}
		if announced := len(n.events) == 1; announced != (err == nil) {
			t.Errorf("fail %q policy %q: announced %v", c.fail, c.policy, n.events)
		}
	}
	// Applying what is stored (no Persist) is not news.
	n := &recorder{}
	var log []string
	c := steps(&log, "")
	c.Persist = nil
	if err := New(quiet(), n, nil).Apply(context.Background(), c); err != nil || len(n.events) != 0 {
		t.Fatalf("reload: %v, announced %v", err, n.events)
	}
}

// A change waits for the one under way, its wait ends with its context, and
// Stop waits for the change under way, then refuses more; twice is fine.
func TestOneChangeAtATime(t *testing.T) {
	t.Parallel()
	p := New(quiet(), nil, nil)
	inBuild, release := make(chan struct{}), make(chan struct{})
	first := make(chan error)
	go func() {
		first <- p.Apply(context.Background(), Change{Build: func(context.Context) error {
			close(inBuild)
			<-release
			return nil
		}})
	}()
	<-inBuild
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Apply(ctx, Change{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a second change did not wait: %v", err)
	}
	stopped := make(chan error)
	go func() { stopped <- p.Stop(context.Background()) }()
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Apply(context.Background(), Change{}); !errors.Is(err, ErrStopped) {
		t.Fatalf("after stop: %v", err)
	}
}
