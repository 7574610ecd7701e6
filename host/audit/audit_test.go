package audit

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/host/lifecycle"
	"github.com/cyrnel/cyrnel/host/retention"
	"github.com/cyrnel/cyrnel/host/store"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), "", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func record(i int, at time.Time) store.ToolCall {
	return store.ToolCall{At: at, ServiceID: "s", ToolID: "t", Policy: "allow", Outcome: string(Success), Source: "api",
		Parameters: map[string]any{"i": i}}
}

func TestWriterStoresEverythingAndReadersSeeIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t)
	// A linger far longer than the test: only the reader's flush stores.
	w := start(t, New(quiet, st, Options{Linger: time.Hour, Queue: 64}))
	now := time.Now().UTC()
	for i := range 600 { // more than the queue and a batch: the callers wait, nothing is lost
		w.Record(ctx, record(i, now))
	}
	calls, more, err := w.List(ctx, st, store.ToolCallFilter{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != 100 || !more || calls[0].Parameters["i"] != 599.0 {
		t.Fatalf("newest page: %d %v first %+v", len(calls), more, calls[0])
	}
	all, err := st.ListToolCalls(ctx, store.ToolCallFilter{Limit: 1000})
	if err != nil || len(all) != 600 || w.Dropped() != 0 {
		t.Fatalf("stored %d (err %v), dropped %d", len(all), err, w.Dropped())
	}
}

func TestRetentionByCountAndAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t)
	w := start(t, New(quiet, st, Options{}))
	old := time.Now().Add(-48 * time.Hour).UTC()
	for i := range 30 {
		w.Record(ctx, record(i, old))
	}
	now := time.Now().UTC()
	for i := 30; i < 150; i++ {
		w.Record(ctx, record(i, now))
	}
	stop(t, w)
	// A writer prunes when it starts (and then every PruneEvery).
	stop(t, start(t, New(quiet, st, Options{Bounds: retention.Bounds{MaxRecords: 100, MaxAge: 24 * time.Hour}})))
	all, err := st.ListToolCalls(ctx, store.ToolCallFilter{Limit: 1000})
	if err != nil || len(all) != 100 || all[99].Parameters["i"] != 50.0 {
		t.Fatalf("after a count bound: %d (err %v)", len(all), err)
	}
	for i := range 20 {
		w2 := []store.ToolCall{record(1000+i, old)}
		if err := st.InsertToolCalls(ctx, w2); err != nil {
			t.Fatal(err)
		}
	}
	stop(t, start(t, New(quiet, st, Options{Bounds: retention.Bounds{MaxRecords: -1, MaxAge: 24 * time.Hour}})))
	if all, _ = st.ListToolCalls(ctx, store.ToolCallFilter{Limit: 1000}); len(all) != 100 {
		t.Fatalf("after an age bound: %d, want the 100 recent ones", len(all))
	}
}

// start starts w and stops it when the test ends.
func start(t *testing.T, w *Writer) *Writer {
	t.Helper()
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, w) })
	return w
}

// stop stops w (again, at the test's end: a second Stop does nothing).
func stop(t *testing.T, w *Writer) {
	t.Helper()
	if err := w.Stop(context.Background()); err != nil {
		t.Error(err)
	}
}

// TestRecordAfterStopIsCountedNotBlocked: a stopped writer drops and counts
// what comes after, and does not start again.
func TestRecordAfterStopIsCountedNotBlocked(t *testing.T) {
	t.Parallel()
	w := start(t, New(quiet, openStore(t), Options{}))
	stop(t, w)
	w.Record(context.Background(), record(1, time.Now()))
	if w.Dropped() != 1 {
		t.Fatalf("dropped %d", w.Dropped())
	}
	w.Flush(context.Background()) // returns: nothing is pending
	if err := w.Start(context.Background()); !errors.Is(err, lifecycle.ErrStopped) {
		t.Fatalf("Start after Stop = %v, want ErrStopped", err)
	}
}

func TestRedact(t *testing.T) {
	t.Parallel()
	in := map[string]any{
		"petId": 1, "api_key": "k1", "X-Auth-Token": "k2", "body": map[string]any{"password": "k3", "name": "rex", "items": []any{map[string]any{"clientSecret": "k4"}}},
	}
	got := Redact(in)
	body := got["body"].(map[string]any)
	if got["petId"] != 1 || got["api_key"] != Redacted || got["X-Auth-Token"] != Redacted || body["password"] != Redacted || body["name"] != "rex" ||
		body["items"].([]any)[0].(map[string]any)["clientSecret"] != Redacted {
		t.Fatalf("redacted: %v", got)
	}
	if in["api_key"] != "k1" || in["body"].(map[string]any)["password"] != "k3" {
		t.Fatalf("the input changed: %v", in)
	}
}
