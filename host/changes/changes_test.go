package changes

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/host/store/storetest"

	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/retention"
)

// stores is a fresh SQLite store and, when CYRNEL_TEST_POSTGRES_URL names
// a database, a PostgreSQL one in a schema of its own.

// TestRecordListAndBound: changes carry the key in the context (host when
// none), list newest first across pages, and the record keeps only the
// newest MaxRecords.
func TestRecordListAndBound(t *testing.T) {
	t.Parallel()
	for name, st := range storetest.Stores(t) {
		t.Run(name, func(t *testing.T) {
			// Not started: its pruning, whose first pass runs at once,
			// starts once the records are in.
			l := New(slog.New(slog.NewTextHandler(io.Discard, nil)), st, Options{Bounds: retention.Bounds{MaxRecords: 3, PruneEvery: time.Hour}})
			ctx := caller.With(context.Background(), caller.Caller{KeyID: "key_a", Roles: []caller.Role{caller.Admin}})
			for i := range 5 {
				l.Record(ctx, "module.config", fmt.Sprint(i), map[string]any{"config": map[string]any{"n": i}})
			}
			l.Record(context.Background(), "environment.switch", "python", nil)
			var got []string
			in := ListInput{Limit: 4}
			for {
				items, more, err := l.List(ctx, in)
				if err != nil {
					t.Fatal(err)
				}
				for _, c := range items {
					got = append(got, c.KeyID+" "+c.Target)
				}
				if !more {
					break
				}
				in.BeforeID = items[len(items)-1].ID
			}
			if want := "host python,key_a 4,key_a 3,key_a 2,key_a 1,key_a 0"; strings.Join(got, ",") != want {
				t.Fatalf("listed %q, want %q", got, want)
			}
			// Stop returns once the loop did, so after its first pass.
			if err := l.Start(ctx); err != nil {
				t.Fatal(err)
			}
			if err := l.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			items, _, err := l.List(ctx, ListInput{Limit: 10})
			if err != nil || len(items) != 3 || items[2].Target != "3" || items[1].Detail["config"].(map[string]any)["n"] != 4.0 {
				t.Fatalf("after pruning to 3: %+v %v", items, err)
			}
		})
	}
}
