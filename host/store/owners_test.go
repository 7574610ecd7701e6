package store

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestOwnersOnEveryDialect: a process and a session keep the key that owns
// them, a listing by owner returns that key's rows only (newest first,
// paged), an approval keeps the key that asked and the key that decided,
// an expiry records no decider, and a tool call keeps its key.
func TestOwnersOnEveryDialect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for name, st := range stores(t) {
		t.Run(name, func(t *testing.T) {
			at := time.Now().UTC().Truncate(time.Millisecond)
			pids := map[string][]int64{}
			for i := range 6 {
				owner := []string{"key_a", "key_b", ""}[i%3]
				p := &Process{Code: "x", State: "idle", TimeoutMs: 1, CreatedAt: at, HostID: "h", Owner: owner}
				write(t, st, func(tx *Tx) error { return tx.InsertProcess(ctx, p) })
				pids[owner] = append(pids[owner], p.PID)
			}
			if got, err := st.GetProcess(ctx, pids["key_a"][0]); err != nil || got.Owner != "key_a" {
				t.Fatalf("process of key_a: %+v %v", got, err)
			}
			list, err := st.ListProcesses(ctx, ProcessFilter{Owner: "key_a", Limit: 10})
			if err != nil || fmt.Sprint(pidsOf(list)) != fmt.Sprint([]int64{pids["key_a"][1], pids["key_a"][0]}) {
				t.Fatalf("key_a's processes: %v %v, want %v newest first", pidsOf(list), err, pids["key_a"])
			}
			list, err = st.ListProcesses(ctx, ProcessFilter{Owner: "key_a", BeforePID: pids["key_a"][1], Limit: 10})
			if err != nil || fmt.Sprint(pidsOf(list)) != fmt.Sprint(pids["key_a"][:1]) {
				t.Fatalf("key_a's second page: %v %v", pidsOf(list), err)
			}
			if all, err := st.ListProcesses(ctx, ProcessFilter{Limit: 10}); err != nil || len(all) != 6 {
				t.Fatalf("everyone's processes: %d %v", len(all), err)
			}

			for i, id := range []string{"ses_1", "ses_2", "ses_3"} {
				s := &Session{ID: id, Module: "python", State: "ready", IdleTimeoutMs: 1, MaxLifetimeMs: 1, HostID: "h",
					CreatedAt: at.Add(time.Duration(i) * time.Second), LastUsedAt: at, Owner: []string{"key_a", "key_b", "key_a"}[i]}
				if err := st.InsertSession(ctx, s); err != nil {
					t.Fatal(err)
				}
			}
			ses, err := st.ListSessions(ctx, SessionFilter{Owner: "key_a", Limit: 10})
			if err != nil || len(ses) != 2 || ses[0].ID != "ses_3" || ses[1].ID != "ses_1" || ses[0].Owner != "key_a" {
				t.Fatalf("key_a's sessions: %+v %v", ses, err)
			}

			for _, id := range []string{"apr_1", "apr_2"} {
				a := &Approval{ID: id, State: "pending", ServiceID: "s", ToolID: "t", Parameters: map[string]any{}, CreatedAt: at, ExpiresAt: at, KeyID: "key_a"}
				if err := st.InsertApproval(ctx, a); err != nil {
					t.Fatal(err)
				}
			}
			if ok, err := st.DecideApproval(ctx, "apr_1", "approved", "key_approver", at); !ok || err != nil {
				t.Fatalf("decide: %v %v", ok, err)
			}
			if ok, err := st.DecideApproval(ctx, "apr_1", "denied", "key_other", at); ok || err != nil {
				t.Fatalf("a second decision: %v %v", ok, err)
			}
			if n, err := st.ExpirePendingApprovals(ctx, at); n != 1 || err != nil {
				t.Fatalf("expire: %d %v", n, err)
			}
			for id, want := range map[string][2]string{"apr_1": {"approved", "key_approver"}, "apr_2": {"expired", ""}} {
				if a, err := st.GetApproval(ctx, id); err != nil || a.KeyID != "key_a" || a.State != want[0] || a.DecidedBy != want[1] {
					t.Fatalf("%s: %+v %v, want %v decided by %q", id, a, err, want[0], want[1])
				}
			}

			if err := st.InsertToolCalls(ctx, []ToolCall{{At: at, ServiceID: "s", ToolID: "t", Policy: "allow", Outcome: "success",
				Parameters: map[string]any{}, Source: "api", KeyID: "key_b"}}); err != nil {
				t.Fatal(err)
			}
			if calls, err := st.ListToolCalls(ctx, ToolCallFilter{Limit: 1}); err != nil || len(calls) != 1 || calls[0].KeyID != "key_b" {
				t.Fatalf("tool calls: %+v %v", calls, err)
			}
		})
	}
}

func pidsOf(ps []Process) []int64 {
	out := make([]int64, len(ps))
	for i, p := range ps {
		out[i] = p.PID
	}
	return out
}
