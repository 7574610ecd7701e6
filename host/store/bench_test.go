package store

import (
	"context"
	"testing"
	"time"
)

// BenchmarkProcessWrites: the two writes on an execution's critical path on
// SQLite, each its own transaction as the writer commits them when alone:
// the insert and the final row.
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
			if err := st.WriteProcesses(ctx, func(ctx context.Context, tx *Tx) error { return tx.InsertProcess(ctx, p) }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("finish", func(b *testing.B) {
		p := &Process{Code: "pass", State: "queued", TimeoutMs: 30000, CreatedAt: time.Now(), Runs: 1}
		if err := st.WriteProcesses(ctx, func(ctx context.Context, tx *Tx) error { return tx.InsertProcess(ctx, p) }); err != nil {
			b.Fatal(err)
		}
		for range b.N {
			now := time.Now()
			p.State, p.ExitState, p.FinishedAt, p.Stdout = "idle", &exit, &now, "hi\n"
			if _, err := inTx(st, func(tx *Tx) (bool, error) { return tx.FinishProcess(ctx, p, []string{"queued", "idle"}) }); err != nil {
				b.Fatal(err)
			}
		}
	})
}
