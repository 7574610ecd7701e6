package cluster

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/pgtest"
	"github.com/cyrnel/cyrnel/host/store"
)

// throughOutage is a fresh schema reached through an outage proxy, with a
// store on that URL.
func throughOutage(t *testing.T) (*pgtest.Outage, string, *store.Store) {
	t.Helper()
	direct, _ := schemaURL(t)
	o, url := pgtest.NewOutage(t, direct)
	st, err := store.Open(context.Background(), url, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return o, url, st
}

// TestKillAfterTheDatabaseCameBack: after the database went away and came
// back, the first kill asked through one host reaches the runner, and so
// does a kill whose notification the runner missed (it is in the database).
// Before, the asking host's notifying connection was stale, and its next
// message was lost.
func TestKillAfterTheDatabaseCameBack(t *testing.T) {
	t.Parallel()
	o, url, st := throughOutage(t)
	ra, rb := newRecorder(), newRecorder()
	a := joinWith(t, url, st, "a", ra, Options{TTL: 3 * time.Second, Sync: 500 * time.Millisecond})
	joinWith(t, url, st, "b", rb, Options{TTL: 3 * time.Second, Sync: 500 * time.Millisecond})
	ctx := context.Background()
	o.Cut()
	o.Restore()
	if err := a.Kill(ctx, "b", 7); err != nil {
		t.Fatalf("the first kill after the database came back: %v", err)
	}
	if pid := receive(t, rb.kill, "kill on b"); pid != 7 {
		t.Fatalf("b killed %d", pid)
	}
	// A kill stored while b hears nothing: its sync finds it.
	if err := st.RequestKill(ctx, "b", 8); err != nil {
		t.Fatal(err)
	}
	if pid := receive(t, rb.kill, "stored kill on b"); pid != 8 {
		t.Fatalf("b killed %d", pid)
	}
}

// TestConfigChangeWithoutNotice: a change no notification announced reaches
// a host at its next sync; the control: nothing is applied while nothing
// changed.
func TestConfigChangeWithoutNotice(t *testing.T) {
	t.Parallel()
	_, url, st := throughOutage(t)
	r := newRecorder()
	ev := control.Event{Kind: control.KindModule, ID: "python"}
	r.setVersion(ev, "1")
	joinWith(t, url, st, "a", r, Options{TTL: 3 * time.Second, Sync: 200 * time.Millisecond})
	if got := receive(t, r.config, "the first sync"); got != ev {
		t.Fatalf("first sync applied %v", got)
	}
	r.setVersion(ev, "2")
	if got := receive(t, r.config, "the changed version"); got != ev {
		t.Fatalf("applied %v", got)
	}
	// Several syncs with nothing changed apply nothing.
	r.setVersion(control.Event{Kind: control.KindService, ID: "marker"}, "1")
	if got := receive(t, r.config, "the marker"); got.ID != "marker" {
		t.Fatalf("applied %v while nothing changed", got)
	}
}

// TestNoHostLostAfterAnOutage: after an outage longer than the lease, no
// host judges the others lost until it has itself been reachable for a
// whole lease (by then every live host renewed). Before, the first host to
// reconnect finished the others' executions at once.
func TestNoHostLostAfterAnOutage(t *testing.T) {
	t.Parallel()
	o, url, st := throughOutage(t)
	const ttl = 1500 * time.Millisecond
	r := newRecorder()
	joinWith(t, url, st, "a", r, Options{TTL: ttl})
	// Control: reachable for a lease, the host judges at every renewal.
	receive(t, r.lost, "a judgement before the outage")
	o.Cut()
	cutAt := time.Now()
	for time.Since(cutAt) < 2*ttl {
		select {
		case <-r.lost:
		case <-time.After(ttl / 3):
		}
	}
	for len(r.lost) > 0 {
		<-r.lost
	}
	o.Restore()
	back := time.Now()
	at := receive(t, r.lost, "a judgement after the outage")
	if at.Sub(back) < ttl {
		t.Fatalf("lost hosts judged %v after the database came back, within a lease (%v)", at.Sub(back), ttl)
	}
}

// renewals passes renewals to the store and tells each one's result.
type renewals struct {
	*store.Store
	results chan error
}

func (r renewals) RenewLease(ctx context.Context, hostID, addr string, ttl time.Duration) error {
	err := r.Store.RenewLease(ctx, hostID, addr, ttl)
	select {
	case r.results <- err:
	default:
	}
	return err
}

// TestLeaseBackSoonAfterTheDatabase: once a renewal failed, the next is
// tried within about a second, not a third of the TTL later, so after an
// outage longer than the lease the host is back (and reachable for
// forwarded requests) within the 3 s the others' changes take.
func TestLeaseBackSoonAfterTheDatabase(t *testing.T) {
	t.Parallel()
	o, url, st := throughOutage(t)
	r := renewals{st, make(chan error, 16)}
	c := New(slog.New(slog.NewTextHandler(io.Discard, nil)), url, "h", r, Options{TTL: 15 * time.Second})
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(context.Background()) }) //nolint:errcheck // it waits without a deadline
	if err := <-r.results; err != nil {
		t.Fatalf("the first renewal: %v", err)
	}
	o.Cut()
	select { // the first tick comes a third of the TTL after Start
	case err := <-r.results:
		if err == nil {
			t.Fatal("a renewal succeeded while the database was away")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no renewal within 10 s")
	}
	o.Restore()
	back := time.Now()
	timeout := time.NewTimer(3 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case err := <-r.results:
			if err == nil {
				t.Logf("renewed %v after the database came back", time.Since(back).Round(time.Millisecond))
				return
			}
		case <-timeout.C:
			t.Fatal("no renewal within 3 s of the database's return")
		}
	}
}
