package store

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestPruneApprovalsOnEveryDialect: decided approvals beyond the newest
// keep, or created before the age bound, go; pending ones always stay.
func TestPruneApprovalsOnEveryDialect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			now := time.Now().UTC().Truncate(time.Millisecond)
			old := now.Add(-48 * time.Hour)
			add := func(id, state string, at time.Time) {
				t.Helper()
				a := &Approval{ID: id, State: state, ServiceID: "s", ToolID: "t", Parameters: map[string]any{}, CreatedAt: at, ExpiresAt: at.Add(time.Hour)}
				if err := st.InsertApproval(ctx, a); err != nil {
					t.Fatal(err)
				}
			}
			// Ids sort by creation, as the approval manager makes them.
			add("apr_0", "pending", old)
			add("apr_1", "expired", old)
			for i := 2; i <= 6; i++ {
				add(fmt.Sprintf("apr_%d", i), []string{"approved", "denied"}[i%2], now)
			}
			add("apr_7", "pending", now)
			ids := func() string {
				rows, err := st.ListApprovals(ctx, ApprovalFilter{Limit: 100})
				if err != nil {
					t.Fatal(err)
				}
				var out []string
				for _, r := range rows {
					out = append(out, r.ID)
				}
				return fmt.Sprint(out)
			}
			if err := st.PruneApprovals(ctx, 0, now.Add(-24*time.Hour)); err != nil {
				t.Fatal(err)
			}
			if got, want := ids(), "[apr_7 apr_6 apr_5 apr_4 apr_3 apr_2 apr_0]"; got != want {
				t.Fatalf("after the age bound: %s, want %s", got, want)
			}
			if err := st.PruneApprovals(ctx, 2, time.Time{}); err != nil {
				t.Fatal(err)
			}
			if got, want := ids(), "[apr_7 apr_6 apr_5 apr_0]"; got != want {
				t.Fatalf("after the count bound: %s, want %s", got, want)
			}
		})
	}
}

// TestPruneToolCallsInBatches: more records past the count bound than one
// delete takes all go, the newest kept; then past the age bound, more than
// a batch again, the newer ones (the controls) staying.
func TestPruneToolCallsInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			calls := func(n int, at time.Time) {
				cs := make([]ToolCall, n)
				for i := range cs {
					cs[i] = ToolCall{At: at, ServiceID: "s", ToolID: "t", Policy: "allow", Outcome: "ok", Parameters: map[string]any{}, Source: "api"}
				}
				if err := st.InsertToolCalls(ctx, cs); err != nil {
					t.Fatal(err)
				}
			}
			count := func() int64 {
				n, err := st.DB.NewSelect().Model((*ToolCall)(nil)).Count(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
			now := time.Now()
			calls(2*deleteBatch+3, now)
			if err := st.PruneToolCalls(ctx, 5, time.Time{}); err != nil {
				t.Fatal(err)
			}
			if n := count(); n != 5 {
				t.Fatalf("%d records past a bound of 5", n)
			}
			calls(2*deleteBatch+3, now.Add(-48*time.Hour))
			if err := st.PruneToolCalls(ctx, 0, now.Add(-24*time.Hour)); err != nil {
				t.Fatal(err)
			}
			if n := count(); n != 5 {
				t.Fatalf("%d records left by the age bound, want the 5 newer", n)
			}
		})
	}
}
