package process

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/host/store"
)

// TestPruneDeletesPastTheBoundsInBatches: a round deletes every finished
// process past the age bound, more than one batch of them, through the
// writer; a live one as old and a recent one (the controls) stay. A round
// whose context has ended (Stop) deletes nothing.
func TestPruneDeletesPastTheBoundsInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t, t.TempDir())
	m := New(slog.New(slog.NewTextHandler(io.Discard, nil)), st, &scripted{}, DefaultLimits(), "test-host", 0, With{})
	rounds := make(chan struct{}, 1)
	m.afterPrune = func() {
		select {
		case rounds <- struct{}{}:
		default: // a round past the test's first
		}
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(ctx) }) //nolint:errcheck // nothing runs
	// The round at start-up, before any row; the next is a minute away.
	<-rounds
	old := m.now().Add(-m.limits.Keep.MaxAge - time.Hour)
	row := func(state string, at time.Time) *store.Process {
		p := &store.Process{Code: "x", State: state, TimeoutMs: 1, CreatedAt: at, HostID: "h"}
		if state == string(Idle) {
			p.FinishedAt = &at
		}
		return p
	}
	live := row(string(Running), old)
	insert(t, m, live)
	past := make([]*store.Process, 2*pruneBatch+7)
	for i := range past {
		past[i] = row(string(Idle), old)
	}
	insert(t, m, past...)
	recent := row(string(Idle), m.now())
	insert(t, m, recent)

	stopped, cancel := context.WithCancel(ctx)
	cancel()
	m.prune(stopped)
	if _, err := st.GetProcess(ctx, past[0].PID); err != nil {
		t.Fatalf("a round stopped before it began deleted: %v", err)
	}

	m.prune(ctx)
	for _, p := range past {
		if _, err := st.GetProcess(ctx, p.PID); err == nil {
			t.Fatalf("process %d, past the age bound, was kept", p.PID)
		}
	}
	for _, p := range []*store.Process{live, recent} {
		if _, err := st.GetProcess(ctx, p.PID); err != nil {
			t.Fatalf("process %d (%s) was pruned: %v", p.PID, p.State, err)
		}
	}
}
