package keys

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/cyrnel/cyrnel/host/store/storetest"

	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/store"
)

// stores is a fresh SQLite store and, when CYRNEL_TEST_POSTGRES_URL names
// a database, a PostgreSQL one in a schema of its own.

// changes records what the record of changes is told.
type changes struct {
	mu  sync.Mutex
	got []string
}

func (c *changes) Record(ctx context.Context, action, target string, _ map[string]any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	who := "host"
	if k, ok := caller.From(ctx); ok {
		who = k.KeyID
	}
	c.got = append(c.got, who+" "+action+" "+target)
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newManager(t testing.TB, st Store, opts Options) (*Manager, *changes) {
	t.Helper()
	rec := &changes{}
	m := New(quiet(), st, rec, opts)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) }) //nolint:errcheck // it waits without a deadline
	return m, rec
}

func fieldOf(err error) string {
	var fe *schema.FieldError
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}

// TestKeysOnEveryDialect: a key is created with its roles, authenticates
// as them, is stored only as its hash, lists after the bootstrap key, and
// once revoked is refused; bad input names its field.
func TestKeysOnEveryDialect(t *testing.T) {
	t.Parallel()
	for name, st := range storetest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := caller.With(context.Background(), caller.Caller{KeyID: BootstrapID, Roles: []caller.Role{caller.Admin}})
			m, rec := newManager(t, st, Options{Bootstrap: "operator-key"})
			c, err := m.Authenticate(ctx, "operator-key")
			if err != nil || c.KeyID != BootstrapID || !c.Has(caller.Admin) {
				t.Fatalf("bootstrap: %+v %v", c, err)
			}
			k, err := m.Create(ctx, CreateInput{Name: "agent", Roles: []caller.Role{caller.Runner}})
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(k.Secret, "cyk_") || len(k.Secret) < 40 || !strings.HasPrefix(k.ID, "key_") {
				t.Fatalf("created %+v", k)
			}
			c, err = m.Authenticate(ctx, k.Secret)
			if err != nil || c.KeyID != k.ID || c.Has(caller.Approver) || !c.Has(caller.Runner) {
				t.Fatalf("runner key: %+v %v", c, err)
			}
			// The database holds the hash, never the key.
			var rows []map[string]any
			if err := st.DB.NewSelect().Table("api_keys").Scan(ctx, &rows); err != nil {
				t.Fatal(err)
			}
			h := sha256.Sum256([]byte(k.Secret))
			if row, err := st.GetAPIKey(ctx, k.ID); err != nil || !bytes.Equal(row.Hash, h[:]) || len(rows) != 1 {
				t.Fatalf("stored %v (%d rows), want the hash %x", row, len(rows), h)
			}
			if strings.Contains(fmt.Sprintf("%v %s", rows, rows), strings.TrimPrefix(k.Secret, "cyk_")) {
				t.Fatalf("the key itself is stored: %v", rows)
			}
			list, more, err := m.List(ctx, ListInput{Limit: 10})
			if err != nil || more || len(list) != 2 || list[0].ID != BootstrapID || list[1].ID != k.ID || list[1].Roles[0] != caller.Runner {
				t.Fatalf("list %+v %v %v", list, more, err)
			}
			if got, err := m.Get(ctx, k.ID); err != nil || got.Name != "agent" {
				t.Fatalf("get %+v %v", got, err)
			}
			if err := m.Revoke(ctx, k.ID); err != nil {
				t.Fatal(err)
			}
			if _, err := m.Authenticate(ctx, k.Secret); !errors.Is(err, ErrUnknown) {
				t.Fatalf("revoked key: %v", err)
			}
			if err := m.Revoke(ctx, k.ID); !errors.Is(err, ErrNotFound) {
				t.Fatalf("revoke twice: %v", err)
			}
			if _, err := m.Get(ctx, k.ID); !errors.Is(err, ErrNotFound) {
				t.Fatalf("get revoked: %v", err)
			}
			if err := m.Revoke(ctx, BootstrapID); !errors.Is(err, ErrBootstrap) {
				t.Fatalf("revoke bootstrap: %v", err)
			}
			if want := "bootstrap key.create " + k.ID + ",bootstrap key.revoke " + k.ID; strings.Join(rec.got, ",") != want {
				t.Fatalf("recorded %q, want %q", rec.got, want)
			}
			past := time.Now().Add(-time.Minute)
			for _, bad := range []struct {
				in    CreateInput
				field string
			}{
				{CreateInput{Name: "x", Roles: []caller.Role{"root"}}, "roles[0]"},
				{CreateInput{Name: "x", Roles: []caller.Role{caller.Runner, caller.Runner}}, "roles[1]"},
				{CreateInput{Name: "x"}, "roles"},
				{CreateInput{Name: "", Roles: []caller.Role{caller.Runner}}, "name"},
				{CreateInput{Name: "x", Roles: []caller.Role{caller.Runner}, ExpiresAt: &past}, "expiresAt"},
			} {
				if _, err := m.Create(ctx, bad.in); fieldOf(err) != bad.field {
					t.Errorf("%+v: %v, want a problem at %s", bad.in, err, bad.field)
				}
			}
		})
	}
}

// TestExpiredKeysAreRefused: a key past its expiresAt authenticates
// nothing, one before it does, and a cached key stops at its expiry.
func TestExpiredKeysAreRefused(t *testing.T) {
	t.Parallel()
	for name, st := range storetest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			m, _ := newManager(t, st, Options{})
			for i, offset := range []time.Duration{-time.Second, time.Hour} {
				secret := fmt.Sprintf("secret-%d", i)
				h := sha256.Sum256([]byte(secret))
				at := time.Now().Add(offset).UTC()
				if err := st.InsertAPIKey(ctx, &store.APIKey{ID: fmt.Sprintf("key_%d", i), Name: "k", Roles: []string{"runner"}, Hash: h[:], CreatedAt: time.Now().UTC(), ExpiresAt: &at}); err != nil {
					t.Fatal(err)
				}
				_, err := m.Authenticate(ctx, secret)
				if expired := offset < 0; expired != errors.Is(err, ErrExpired) || (!expired && err != nil) {
					t.Errorf("key expiring %v from now: %v", offset, err)
				}
			}
			// A cached key is refused once its expiry passes, cache or not.
			clock := clockwork.NewFakeClockAt(time.Now())
			later, _ := newManager(t, st, Options{Now: clock.Now, CacheTTL: 2 * time.Hour})
			if _, err := later.Authenticate(ctx, "secret-1"); err != nil {
				t.Fatalf("before its expiry: %v", err)
			}
			clock.Advance(time.Hour)
			if _, err := later.Authenticate(ctx, "secret-1"); !errors.Is(err, ErrExpired) {
				t.Errorf("cached key an hour later: %v, want ErrExpired", err)
			}
			if _, err := m.Authenticate(ctx, "never-made"); !errors.Is(err, ErrUnknown) {
				t.Errorf("unknown key: %v", err)
			}
			if _, err := m.Authenticate(ctx, ""); !errors.Is(err, ErrUnknown) {
				t.Errorf("no key: %v", err)
			}
		})
	}
}

// TestRevocationReachesEveryHost: two hosts on one database; a key the
// second has cached is refused there once its cache time has passed, and
// not before (b's clock is moved by hand: the test waits for nothing).
func TestRevocationReachesEveryHost(t *testing.T) {
	t.Parallel()
	for name, st := range storetest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			a, _ := newManager(t, st, Options{})
			clock := clockwork.NewFakeClockAt(time.Now())
			b, _ := newManager(t, st, Options{Now: clock.Now, CacheTTL: time.Minute})
			k, err := a.Create(ctx, CreateInput{Name: "agent", Roles: []caller.Role{caller.Runner}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.Authenticate(ctx, k.Secret); err != nil {
				t.Fatal(err)
			}
			if err := a.Revoke(ctx, k.ID); err != nil {
				t.Fatal(err)
			}
			// The control: within its cache time the other host still
			// trusts what it read, so the refusal below is the cache's end.
			clock.Advance(time.Minute - time.Millisecond)
			if _, err := b.Authenticate(ctx, k.Secret); err != nil {
				t.Fatalf("within the cache time: %v", err)
			}
			clock.Advance(2 * time.Millisecond)
			if _, err := b.Authenticate(ctx, k.Secret); !errors.Is(err, ErrUnknown) {
				t.Fatalf("once the cache time passed: %v, want ErrUnknown", err)
			}
		})
	}
}

// countingStore counts lastUsedAt writes and key reads.
type countingStore struct {
	*store.Store
	touches, reads atomic.Int64
}

func (c *countingStore) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	c.touches.Add(1)
	return c.Store.TouchAPIKey(ctx, id, at)
}

func (c *countingStore) APIKeyByHash(ctx context.Context, h []byte) (*store.APIKey, error) {
	c.reads.Add(1)
	return c.Store.APIKeyByHash(ctx, h)
}

// TestLastUsedIsThrottled: a thousand requests with one key make one write
// of lastUsedAt and one read (the cache), and lastUsedAt is set.
func TestLastUsedIsThrottled(t *testing.T) {
	t.Parallel()
	st := &countingStore{Store: storetest.Stores(t)["sqlite"]}
	ctx := context.Background()
	rec := &changes{}
	m := New(quiet(), st, rec, Options{CacheTTL: time.Hour})
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	k, err := m.Create(ctx, CreateInput{Name: "agent", Roles: []caller.Role{caller.Runner}})
	if err != nil {
		t.Fatal(err)
	}
	for range 1000 {
		if _, err := m.Authenticate(ctx, k.Secret); err != nil {
			t.Fatal(err)
		}
	}
	if err := m.Stop(ctx); err != nil { // writes what is queued
		t.Fatal(err)
	}
	if n, r := st.touches.Load(), st.reads.Load(); n != 1 || r != 1 {
		t.Fatalf("%d writes of lastUsedAt and %d reads for 1000 requests, want 1 and 1", n, r)
	}
	got, err := st.GetAPIKey(ctx, k.ID)
	if err != nil || got.LastUsedAt == nil || time.Since(*got.LastUsedAt) > time.Minute {
		t.Fatalf("lastUsedAt %+v %v", got, err)
	}
}

// TestListPages: newest first, the bootstrap key heading the first page,
// every key once across pages.
func TestListPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, _ := newManager(t, storetest.Stores(t)["sqlite"], Options{Bootstrap: "op"})
	var made []string
	for i := range 4 {
		k, err := m.Create(ctx, CreateInput{Name: fmt.Sprint(i), Roles: []caller.Role{caller.Approver}})
		if err != nil {
			t.Fatal(err)
		}
		made = append([]string{k.ID}, made...)
	}
	want := append([]string{BootstrapID}, made...)
	for _, limit := range []int{1, 2, 3, 5, 6} {
		var got []string
		before := ""
		for {
			items, more, err := m.List(ctx, ListInput{Before: before, Limit: limit})
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range items {
				got = append(got, k.ID)
			}
			if !more {
				break
			}
			before = items[len(items)-1].ID
		}
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("limit %d: %v, want %v", limit, got, want)
		}
	}
}

// BenchmarkAuthenticateWarm is what a request with a cached key pays: a
// SHA-256 and a map lookup.
func BenchmarkAuthenticateWarm(b *testing.B) {
	st, err := store.Open(context.Background(), "", b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	m, _ := newManager(b, st, Options{CacheTTL: time.Hour})
	ctx := context.Background()
	k, err := m.Create(ctx, CreateInput{Name: "agent", Roles: []caller.Role{caller.Runner}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := m.Authenticate(ctx, k.Secret); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
