// Package storetest opens a store on each database the tests run against:
// SQLite in a temporary directory, and PostgreSQL in a schema of its own
// (host/pgtest) unless CYRNEL_TEST_NO_POSTGRES says why this machine has
// none. Only tests import it.
package storetest

import (
	"context"
	"os"
	"testing"

	"github.com/cyrnel/cyrnel/host/pgtest"
	"github.com/cyrnel/cyrnel/host/store"
)

// Stores returns a migrated store by dialect ("sqlite", "postgres"), closed
// with the test.
func Stores(t testing.TB) map[string]*store.Store {
	t.Helper()
	ctx := context.Background()
	open := func(url, dir string) *store.Store {
		st, err := store.Open(ctx, url, dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		return st
	}
	out := map[string]*store.Store{"sqlite": open("", t.TempDir())}
	if os.Getenv("CYRNEL_TEST_POSTGRES_URL") == "" && os.Getenv("CYRNEL_TEST_NO_POSTGRES") != "" {
		return out // SQLite only, as declared
	}
	out["postgres"] = open(pgtest.Schema(t, pgtest.URL(t)), "")
	return out
}
