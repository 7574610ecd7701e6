package session

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/store"
)

// interpreter stands in for a session's runtime: what is decided here is
// when the session ends, not how code runs.
type interpreter struct {
	module.Session // the files are not used
	ran            atomic.Int32
	once           sync.Once
	done           chan struct{}
}

func (i *interpreter) Execute(context.Context, module.ExecutionInput) (module.Result, bool) {
	i.ran.Add(1)
	return module.Result{Exit: module.ExitSuccess}, true
}

func (i *interpreter) Done() <-chan struct{} { return i.done }
func (i *interpreter) Close()                { i.once.Do(func() { close(i.done) }) }

// environment starts interpreters; nothing else of it is used.
type environment struct {
	module.Environment
	started []*interpreter
}

func (e *environment) Info() module.Info { return module.Info{ID: "stand-in"} }

func (e *environment) StartSession(context.Context) (module.Session, error) {
	i := &interpreter{done: make(chan struct{})}
	e.started = append(e.started, i)
	return i, nil
}

func (e *environment) Active() (module.Environment, error) { return e, nil }

// TestTheClockEndsSessions: a session's idle and lifetime deadlines are the
// manager's clock's. An execution that arrives once the clock has passed
// one finds the session ended for that reason and never runs; one that
// arrives just before runs (the control).
func TestTheClockEndsSessions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   CreateInput // one deadline a minute after the start
		want string      // the end it makes
	}{
		{CreateInput{IdleTimeoutMs: 60_000}, EndIdleTimeout},
		{CreateInput{IdleTimeoutMs: 3_600_000, MaxLifetimeMs: 60_000}, EndMaxLifetime},
	} {
		t.Run(c.want, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			st, err := store.Open(ctx, "", t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			clk := clockwork.NewFakeClockAt(time.Date(2031, 1, 2, 3, 4, 5, 0, time.UTC))
			env := &environment{}
			m := New(slog.New(slog.NewTextHandler(io.Discard, nil)), st, env, "host-1", Config{Now: clk.Now})
			if err := m.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { m.Stop(context.Background()) }) //nolint:errcheck // it waits without a deadline

			// The control runs just before the deadline; the next
			// execution, at it. The idle time counts from the session's
			// start both times: the control's own end would move it, so
			// each gets a session of its own.
			control, err := m.Create(ctx, c.in)
			if err != nil {
				t.Fatal(err)
			}
			ses, err := m.Create(ctx, c.in)
			if err != nil {
				t.Fatal(err)
			}
			clk.Advance(59 * time.Second)
			if _, res, err := m.Execute(ctx, control.ID, module.ExecutionInput{Code: "1"}); err != nil || res.Exit != module.ExitSuccess {
				t.Fatalf("before the deadline: %+v %v", res, err)
			}
			clk.Advance(time.Second)
			_, _, err = m.Execute(ctx, ses.ID, module.ExecutionInput{Code: "1"})
			if !errors.Is(err, ErrEnded) || !strings.Contains(err.Error(), "("+c.want+")") {
				t.Fatalf("at the deadline: %v, want the session ended (%s)", err, c.want)
			}
			if n := env.started[1].ran.Load(); n != 0 {
				t.Fatalf("the ended session ran %d executions", n)
			}
			row, err := m.Get(ctx, ses.ID)
			if err != nil {
				t.Fatal(err)
			}
			if State(row.State) != Ended || row.EndReason != c.want || row.EndedAt == nil || !row.EndedAt.Equal(clk.Now()) {
				t.Fatalf("stored: %s %s at %v, want ended %s at the clock's %v", row.State, row.EndReason, row.EndedAt, c.want, clk.Now())
			}
		})
	}
}
