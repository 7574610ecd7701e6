package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/host/pgtest"
)

// pgSchema makes a fresh schema in the test database and returns the URL
// that uses it; "" when this machine has no PostgreSQL (the tests then say
// so and skip, as CYRNEL_TEST_NO_POSTGRES allows).
func pgSchema(t *testing.T) string {
	t.Helper()
	url := postgresURL(t)
	if url == "" {
		t.Skip("no PostgreSQL (CYRNEL_TEST_NO_POSTGRES)")
	}
	return pgtest.Schema(t, url)
}

// Hosts starting at once all migrate the same fresh schema: the advisory
// lock makes them wait for each other instead of failing (bun's lock row
// alone fails every host but one).
func TestConcurrentMigrationsOnPostgres(t *testing.T) {
	t.Parallel()
	url := pgSchema(t)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() {
			st, err := Open(context.Background(), url, "")
			if err == nil {
				err = st.Close()
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("a host starting with others: %v", err)
		}
	}
}

// FinishLost finishes the live processes of hosts whose lease ran out or
// that have none, and only those, and expires their pending approvals in
// the same transaction (a live host's stay pending).
func TestFinishLostOnPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := Open(ctx, pgSchema(t), "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, h := range []string{"self", "alive", "expired"} {
		if err := st.RenewLease(ctx, h, "", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.DB.ExecContext(ctx, "UPDATE hosts SET lease_until = now() - interval '1 second' WHERE host_id = 'expired'"); err != nil {
		t.Fatal(err)
	}
	pids := map[string]int64{}
	for _, h := range []string{"self", "alive", "expired", "rowless"} {
		p := &Process{Code: "x", State: "running", HostID: h, CreatedAt: time.Now().UTC(), Runs: 1, TimeoutMs: 1000}
		if err := st.WriteProcess(ctx, func(ctx context.Context, tx *Tx) error { return tx.InsertProcess(ctx, p) }); err != nil {
			t.Fatal(err)
		}
		pids[h] = p.PID
		now := time.Now().UTC()
		pid := p.PID
		if err := st.InsertApproval(ctx, &Approval{ID: "apr_" + h, State: "pending", PID: &pid, ServiceID: "s", ToolID: "t",
			Parameters: map[string]any{}, CreatedAt: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	var n int64
	if err := st.WriteProcess(ctx, func(ctx context.Context, tx *Tx) (err error) {
		n, err = tx.FinishLost(ctx, "self", []string{"queued", "running", "terminating"}, "failed", "host_lost", "lost")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("finished %d, want the expired host's and the rowless host's", n)
	}
	for h, want := range map[string]string{"self": "running", "alive": "running", "expired": "idle", "rowless": "idle"} {
		p, err := st.GetProcess(ctx, pids[h])
		if err != nil {
			t.Fatal(err)
		}
		if p.State != want || (want == "idle" && p.Reason != "host_lost") {
			t.Fatalf("process of host %s: %s %s, want %s", h, p.State, p.Reason, want)
		}
		a, err := st.GetApproval(ctx, "apr_"+h)
		if err != nil {
			t.Fatal(err)
		}
		if wantApr := map[string]string{"running": "pending", "idle": "expired"}[want]; a.State != wantApr || (wantApr == "expired") != (a.DecidedAt != nil) {
			t.Fatalf("approval of host %s's process: %s (decided %v), want %s", h, a.State, a.DecidedAt, wantApr)
		}
	}
	if err := st.DropLease(ctx, "alive"); err != nil {
		t.Fatal(err)
	}
	if err := st.WriteProcess(ctx, func(ctx context.Context, tx *Tx) (err error) {
		n, err = tx.FinishLost(ctx, "self", []string{"running"}, "failed", "host_lost", "lost")
		return err
	}); err != nil || n != 1 {
		t.Fatalf("after the alive host dropped its lease: %d %v", n, err)
	}
}

// A host's address is read only while its lease lives; the live sessions
// of hosts whose lease ran out (or that have none) end, and only those.
func TestHostAddressAndLostSessionsOnPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := Open(ctx, pgSchema(t), "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, h := range []string{"self", "alive", "expired"} {
		if err := st.RenewLease(ctx, h, h+".example:9371", time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.DB.ExecContext(ctx, "UPDATE hosts SET lease_until = now() - interval '1 second' WHERE host_id = 'expired'"); err != nil {
		t.Fatal(err)
	}
	if addr, err := st.HostAddress(ctx, "alive"); err != nil || addr != "alive.example:9371" {
		t.Fatalf("address of a live host: %q %v", addr, err)
	}
	for _, h := range []string{"expired", "rowless"} {
		if _, err := st.HostAddress(ctx, h); !errors.Is(err, ErrHostLost) {
			t.Fatalf("address of host %s: %v, want ErrHostLost", h, err)
		}
	}
	now := time.Now().UTC()
	for _, h := range []string{"self", "alive", "expired", "rowless"} {
		if err := st.InsertSession(ctx, &Session{ID: "ses_" + h, Module: "python", State: "ready", HostID: h, CreatedAt: now, LastUsedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := st.EndLostSessions(ctx, "self", "host_lost"); err != nil || n != 2 {
		t.Fatalf("ended %d (%v), want the expired host's and the rowless host's", n, err)
	}
	for h, want := range map[string]string{"self": "ready", "alive": "ready", "expired": "ended", "rowless": "ended"} {
		s, err := st.GetSession(ctx, "ses_"+h)
		if err != nil {
			t.Fatal(err)
		}
		if s.State != want || (want == "ended" && (s.EndReason != "host_lost" || s.EndedAt == nil)) {
			t.Fatalf("session of host %s: %+v, want %s", h, s, want)
		}
	}
}

// A renewal that does not know the host's address (one begun before the
// host advertised it, landing after) keeps the advertised address; one
// that names an address replaces it.
func TestRenewalKeepsTheAdvertisedAddressOnPostgres(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := Open(ctx, pgSchema(t), "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.RenewLease(ctx, "h", "", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := st.HostAddress(ctx, "h"); !errors.Is(err, ErrHostLost) {
		t.Fatalf("address of a host that told none: %v, want ErrHostLost", err)
	}
	for _, step := range []struct{ renew, want string }{
		{"h.example:9371", "h.example:9371"},
		{"", "h.example:9371"},
		{"https://h.example:8443", "https://h.example:8443"},
	} {
		if err := st.RenewLease(ctx, "h", step.renew, time.Minute); err != nil {
			t.Fatal(err)
		}
		if addr, err := st.HostAddress(ctx, "h"); err != nil || addr != step.want {
			t.Fatalf("after a renewal with %q: %q %v, want %q", step.renew, addr, err, step.want)
		}
	}
}
