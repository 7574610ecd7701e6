package store

import (
	"context"
	"testing"
	"time"
)

// BenchmarkProcessWrites: the two writes on an execution's critical path on
// SQLite, the insert and the final row, each committed alone as the writer
// commits a lone write; and the insert inside a transaction, alone and as
// one of a batch of 8.
func BenchmarkProcessWrites(b *testing.B) {
	ctx := context.Background()
	st, err := Open(ctx, "", b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	exit := "success"
	for name, write := range map[string]func(context.Context, func(context.Context, *Tx) error) error{
		"insert": st.WriteProcess, "insert-in-tx": st.WriteProcesses,
	} {
		b.Run(name, func(b *testing.B) {
			for range b.N {
				p := &Process{Code: "pass", State: "queued", TimeoutMs: 30000, CreatedAt: time.Now(), Runs: 1}
				if err := write(ctx, func(ctx context.Context, tx *Tx) error { return tx.InsertProcess(ctx, p) }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("insert-8-per-tx", func(b *testing.B) { // per insert, as in a batch of 8
		for i := 0; i < b.N; i += 8 {
			if err := st.WriteProcesses(ctx, func(ctx context.Context, tx *Tx) error {
				for range 8 {
					p := &Process{Code: "pass", State: "queued", TimeoutMs: 30000, CreatedAt: time.Now(), Runs: 1}
					if err := tx.InsertProcess(ctx, p); err != nil {
						return err
					}
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("finish", func(b *testing.B) {
		p := &Process{Code: "pass", State: "queued", TimeoutMs: 30000, CreatedAt: time.Now(), Runs: 1}
		if err := st.WriteProcesses(ctx, func(ctx context.Context, tx *Tx) error { return tx.InsertProcess(ctx, p) }); err != nil {
			b.Fatal(err)
		}
		for i := range b.N {
			now := time.Now()
			// Two final states in turn, so that every write changes the row.
			p.State, p.ExitState, p.FinishedAt, p.Stdout = [2]string{"idle", "done"}[i%2], &exit, &now, "hi\n"
			if err := st.WriteProcess(ctx, func(ctx context.Context, tx *Tx) error {
				_, err := tx.FinishProcess(ctx, p)
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
