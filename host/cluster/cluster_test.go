package cluster

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/lifecycle"
	"github.com/cyrnel/cyrnel/host/pgtest"
	"github.com/cyrnel/cyrnel/host/store"
)

// schemaURL is a fresh schema of the test database, migrated.
func schemaURL(t *testing.T) (string, *store.Store) {
	t.Helper()
	url := pgtest.Schema(t, pgtest.URL(t))
	st, err := store.Open(context.Background(), url, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return url, st
}

// recorder is a host's handlers, recording what reached it.
type recorder struct {
	config  chan control.Event
	kill    chan int64
	decided chan string
	lost    chan time.Time

	mu       sync.Mutex
	versions map[control.Event]string // what Versions answers
}

func newRecorder() *recorder {
	return &recorder{config: make(chan control.Event, 8), kill: make(chan int64, 8), decided: make(chan string, 8),
		lost: make(chan time.Time, 64), versions: map[control.Event]string{}}
}

func (r *recorder) setVersion(ev control.Event, v string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.versions[ev] = v
}

func (r *recorder) handlers() Handlers {
	return Handlers{
		Config: func(_ context.Context, ev control.Event) error { r.config <- ev; return nil },
		Versions: func(context.Context) (map[control.Event]string, error) {
			r.mu.Lock()
			defer r.mu.Unlock()
			return maps.Clone(r.versions), nil
		},
		Kill: func(_ context.Context, pid int64) error { r.kill <- pid; return nil },
		Lost: func(context.Context) (int64, error) {
			select {
			case r.lost <- time.Now():
			default:
			}
			return 0, nil
		},
		Decided: func(_ context.Context, id string) error { r.decided <- id; return nil },
		Recheck: func(context.Context) error { return nil },
	}
}

func join(t *testing.T, url string, st *store.Store, host string, r *recorder) *Cluster {
	t.Helper()
	return joinWith(t, url, st, host, r, Options{TTL: 3 * time.Second})
}

func joinWith(t *testing.T, url string, st *store.Store, host string, r *recorder, o Options) *Cluster {
	t.Helper()
	ctx := context.Background()
	c := New(slog.New(slog.NewTextHandler(io.Discard, nil)), url, host, st, o)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(ctx) }) //nolint:errcheck // it waits without a deadline
	h := c.Handling(r.handlers())
	if err := h.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Stop(ctx) }) //nolint:errcheck // it waits without a deadline
	return c
}

func receive[T any](t *testing.T, ch chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: nothing within 5s", what)
	}
	var zero T
	return zero
}

// A configuration event reaches the other hosts, not its sender; a kill
// reaches the runner only; a decision reaches the others.
func TestMessages(t *testing.T) {
	t.Parallel()
	url, st := schemaURL(t)
	ra, rb, rc := newRecorder(), newRecorder(), newRecorder()
	a := join(t, url, st, "a", ra)
	join(t, url, st, "b", rb)
	join(t, url, st, "c", rc)
	ctx := context.Background()
	// Each host listens once New returns: one announcement reaches all.
	ev := control.Event{Kind: control.KindService, ID: "pets"}
	a.Notify(ctx, ev)
	if got := receive(t, rb.config, "event on b"); got != ev {
		t.Fatalf("b got %v", got)
	}
	if got := receive(t, rc.config, "event on c"); got != ev {
		t.Fatalf("c got %v", got)
	}
	if err := a.Kill(ctx, "c", 42); err != nil {
		t.Fatal(err)
	}
	if pid := receive(t, rc.kill, "kill on c"); pid != 42 {
		t.Fatalf("c killed %d", pid)
	}
	if err := a.Decided(ctx, "apr_1"); err != nil {
		t.Fatal(err)
	}
	receive(t, rb.decided, "decision on b")
	receive(t, rc.decided, "decision on c")
	// The notifications are ordered: a's own messages and b's kill never
	// arrived, or they would be in the channels before a marker sent last.
	if err := a.Decided(ctx, "marker"); err != nil {
		t.Fatal(err)
	}
	if id := receive(t, rb.decided, "marker on b"); id != "marker" {
		t.Fatalf("b got %s before the marker", id)
	}
	for name, n := range map[string]int{"a config": len(ra.config), "a kill": len(ra.kill), "b kill": len(rb.kill), "a decided": len(ra.decided)} {
		if n != 0 {
			t.Fatalf("%s: %d messages that were not for it", name, n)
		}
	}
}

// Installations in other schemas of one database do not hear each other.
func TestChannelPerSchema(t *testing.T) {
	t.Parallel()
	url1, st1 := schemaURL(t)
	url2, st2 := schemaURL(t)
	r1, r2 := newRecorder(), newRecorder()
	a := join(t, url1, st1, "a", r1)
	b := join(t, url2, st2, "b", r2)
	if a.channel == b.channel {
		t.Fatalf("one channel %s for two schemas", a.channel)
	}
}

// The lease is renewed from Start on: a host loading its configuration
// (starting interpreters) for longer than the lease must not look lost
// before it handles what the others say.
func TestLeaseRenewedBeforeHandling(t *testing.T) {
	t.Parallel()
	url, st := schemaURL(t)
	ctx := context.Background()
	c := New(slog.New(slog.NewTextHandler(io.Discard, nil)), url, "slow", st, Options{TTL: 1500 * time.Millisecond})
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer c.Stop(ctx) //nolint:errcheck // it waits without a deadline
	until := func() time.Time {
		var at time.Time
		if err := st.DB.QueryRowContext(ctx, "SELECT lease_until FROM hosts WHERE host_id = 'slow'").Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	first := until()
	deadline := time.Now().Add(5 * time.Second)
	for !until().After(first) {
		if time.Now().After(deadline) {
			t.Fatal("the lease was not renewed before the handling started")
		}
		time.Sleep(100 * time.Millisecond) // polling the row, not synchronising
	}
}

// TestStartAndStopOnce: a second Start keeps the one listening connection
// and lease; Stop gives the lease up, a second Stop does nothing, and Start
// after Stop is refused without taking the lease again.
func TestStartAndStopOnce(t *testing.T) {
	t.Parallel()
	url, st := schemaURL(t)
	ctx := context.Background()
	c := New(slog.New(slog.NewTextHandler(io.Discard, nil)), url, "once", st, Options{})
	leases := func() int {
		t.Helper()
		var n int
		if err := st.DB.QueryRowContext(ctx, "SELECT count(*) FROM hosts WHERE host_id = 'once' AND lease_until > now()").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for range 2 {
		if err := c.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := leases(); n != 1 {
		t.Fatalf("%d live leases after Start, want 1", n)
	}
	for range 2 {
		if err := c.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Start(ctx); !errors.Is(err, lifecycle.ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
	if n := leases(); n != 0 {
		t.Fatalf("%d live leases after Stop, want 0", n)
	}
}

// A piece of configuration this host changed, then changed back by
// another host whose notice it missed (it was reconnecting), is reloaded
// at its next sync: the version, a digest of the value, is again the one
// the sync saw before this host's own change.
func TestSyncAfterAChangeBack(t *testing.T) {
	t.Parallel()
	url, st := schemaURL(t)
	r := newRecorder()
	env := control.Event{Kind: control.KindEnvironment}
	r.setVersion(env, "typescript")
	a := join(t, url, st, "a", r)
	if got := receive(t, r.config, "the first sync"); got != env {
		t.Fatalf("the first sync reloaded %v", got)
	}
	r.setVersion(env, "python")
	a.Notify(context.Background(), control.Event{Kind: control.KindEnvironment, ID: "python"})
	r.setVersion(env, "typescript") // before a sync ran; the notice missed
	a.syncNow()
	if got := receive(t, r.config, "a reload after the change back"); got != env {
		t.Fatalf("reloaded %v", got)
	}
}
