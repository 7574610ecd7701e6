package worker

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Output returns what a command wrote to stdout; a failure quotes its
// stderr; too much output and a deadline are errors, and the command is
// gone when Output returns.
func TestOutput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sh := func(script string) Command { return Command{Path: "/bin/sh", Args: []string{"-c", script}} }
	out, err := Output(ctx, Plain{}, sh("echo hello; echo noise >&2"), 64)
	if err != nil || string(out) != "hello\n" {
		t.Fatalf("output: %q %v", out, err)
	}
	if _, err := Output(ctx, Plain{}, sh("echo why >&2; exit 3"), 64); err == nil || !strings.Contains(err.Error(), "exit status 3: why") {
		t.Errorf("failure: %v", err)
	}
	if _, err := Output(ctx, Plain{}, sh("head -c 100 /dev/zero"), 64); err == nil || !strings.Contains(err.Error(), "more than 64 bytes") {
		t.Errorf("too much output: %v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	if _, err := Output(ctx, Plain{}, sh("sleep 30"), 64); err == nil || time.Since(t0) > 10*time.Second {
		t.Errorf("deadline: %v after %v", err, time.Since(t0))
	}
}
