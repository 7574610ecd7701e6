package store

import (
	"context"
	"testing"
	"time"
)

// BenchmarkProcessWrites: the writes on an execution's critical path on
// SQLite: insert and final update, or (with waitMs) the final row alone.
func BenchmarkProcessWrites(b *testing.B) {
	ctx := context.Background()
	st, err := Open(ctx, "", b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	exit := "success"
	b.Run("insert", func(b *testing.B) {
		for range b.N {
			p := &Process{Code: "pass", State: "queued", TimeoutMs: 30000, CreatedAt: time.Now(), Runs: 1}
			if err := st.InsertProcess(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("final-insert", func(b *testing.B) { // the only write of a short execution with waitMs
		for range b.N {
			now := time.Now()
			p := &Process{Code: "pass", State: "idle", ExitState: &exit, TimeoutMs: 30000, CreatedAt: now, FinishedAt: &now, Stdout: "hi\n", Runs: 1}
			if err := st.InsertProcess(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("finish", func(b *testing.B) {
		p := &Process{Code: "pass", State: "queued", TimeoutMs: 30000, CreatedAt: time.Now(), Runs: 1}
		st.InsertProcess(ctx, p)
		for range b.N {
			now := time.Now()
			p.State, p.ExitState, p.FinishedAt, p.Stdout = "idle", &exit, &now, "hi\n"
			if _, err := st.FinishProcess(ctx, p, []string{"queued", "idle"}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
