package api

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/keys"
	"github.com/cyrnel/cyrnel/host/store"
)

// BenchmarkAuthentication is what a request pays for its key on the warm
// path: the same GET /processes without authentication, and with a
// cached runner key (the route table's lookup, chi's route search, the
// key's hash and the cache).
func BenchmarkAuthentication(b *testing.B) {
	st, err := store.Open(context.Background(), "", b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	km := keys.New(log, st, nil, keys.Options{})
	if err := km.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer km.Stop(context.Background()) //nolint:errcheck // it waits without a deadline
	k, err := km.Create(context.Background(), keys.CreateInput{Name: "bench", Roles: []caller.Role{caller.Runner}})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		keys Keys
	}{{"none", nil}, {"runner-key", km}} {
		d := Deps{Log: log, Processes: &fakeProcesses{}}
		if c.keys != nil {
			d.Keys = c.keys
		}
		h, _ := New(d)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, "/processes", nil)
				req.Header.Set("Authorization", "Bearer "+k.Secret)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("%d %s", rec.Code, rec.Body)
				}
			}
		})
	}
}
