package lifecycle_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"testing"

	"github.com/cyrnel/cyrnel/host/lifecycle"
)

// record returns a component that notes its start and stop in log.
func record(log *[]string, name string, startErr, stopErr error) lifecycle.Component {
	return lifecycle.Func{
		OnStart: func(context.Context) error { *log = append(*log, "start "+name); return startErr },
		OnStop:  func(context.Context) error { *log = append(*log, "stop "+name); return stopErr },
	}
}

func TestStopUnwindsInReverseAndOnce(t *testing.T) {
	t.Parallel()
	var got []string
	s := lifecycle.New(slog.New(slog.DiscardHandler), nil)
	ctx := context.Background()
	boom := errors.New("boom")
	for _, n := range []string{"a", "b", "c"} {
		var stopErr error
		if n == "b" {
			stopErr = boom
		}
		if err := s.Start(ctx, n, record(&got, n, nil, stopErr)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Stop(ctx); !errors.Is(err, boom) {
		t.Fatalf("Stop = %v, want b's error", err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("second Stop = %v", err)
	}
	want := []string{"start a", "start b", "start c", "stop c", "stop b", "stop a"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestFailedStartIsNotStopped(t *testing.T) {
	t.Parallel()
	var got []string
	boom := errors.New("boom")
	s := lifecycle.New(slog.New(slog.DiscardHandler), func(name string) error {
		if name == "c" {
			return boom
		}
		return nil
	})
	ctx := context.Background()
	if err := s.Start(ctx, "a", record(&got, "a", nil, nil)); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx, "b", record(&got, "b", boom, nil)); !errors.Is(err, boom) {
		t.Fatalf("b = %v", err)
	}
	if err := s.Start(ctx, "c", record(&got, "c", nil, nil)); !errors.Is(err, boom) {
		t.Fatalf("hook did not fail c: %v", err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"start a", "start b", "stop a"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
