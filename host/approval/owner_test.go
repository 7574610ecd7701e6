package approval

import (
	"context"
	"errors"
	"testing"

	"github.com/cyrnel/cyrnel/host/caller"
)

// TestTheAskingKeyCannotDecide: an approval keeps the key that owns the
// execution that asked; that key's decision is refused (ErrOwnExecution)
// and changes nothing, another key's goes through and is recorded as
// decidedBy, and without a caller (no authentication) anyone decides and
// no decider is recorded.
func TestTheAskingKeyCannotDecide(t *testing.T) {
	t.Parallel()
	m := newManager(t, openStore(t), Options{})
	as := func(key string, roles ...caller.Role) context.Context {
		return caller.With(context.Background(), caller.Caller{KeyID: key, Roles: roles})
	}
	req := request(3)
	req.KeyID = "key_a"
	w := wait(context.Background(), m, req)
	a := <-w.created
	if a.KeyID != "key_a" {
		t.Fatalf("approval %+v, want key_a's", a)
	}
	for _, ctx := range []context.Context{as("key_a", caller.Runner), as("key_a", caller.Admin)} {
		if _, err := m.Decide(ctx, a.ID, true); !errors.Is(err, ErrOwnExecution) {
			t.Fatalf("the asking key decides: %v, want ErrOwnExecution", err)
		}
	}
	if got, _ := m.Get(context.Background(), a.ID); State(got.State) != Pending || got.DecidedBy != "" {
		t.Fatalf("after the asking key's attempts: %+v", got)
	}
	decided, err := m.Decide(as("key_approver", caller.Approver), a.ID, false)
	if err != nil || State(decided.State) != Denied || decided.DecidedBy != "key_approver" {
		t.Fatalf("another key's decision: %+v %v", decided, err)
	}
	if r := <-w.done; r.err != nil || State(r.a.State) != Denied || r.a.DecidedBy != "key_approver" {
		t.Fatalf("the call saw %+v %v", r.a, r.err)
	}

	w = wait(context.Background(), m, req)
	a = <-w.created
	if decided, err := m.Decide(context.Background(), a.ID, true); err != nil || decided.DecidedBy != "" {
		t.Fatalf("a decision without a key: %+v %v", decided, err)
	}
	<-w.done
}
