package caller

import (
	"context"
	"testing"
)

// TestSeesAndScope: the host itself, admins and approvers see what every
// key owns and list unscoped; a runner sees only what its key owns (never
// what nobody owns) and lists its own.
func TestSeesAndScope(t *testing.T) {
	t.Parallel()
	as := func(key string, roles ...Role) context.Context {
		return With(context.Background(), Caller{KeyID: key, Roles: roles})
	}
	for _, c := range []struct {
		name   string
		ctx    context.Context
		sees   map[string]bool // by owner
		scope  string
		scoped bool
	}{
		{"the host", context.Background(), map[string]bool{"key_a": true, "": true}, "", false},
		{"an admin", as("root", Admin), map[string]bool{"key_a": true, "": true}, "", false},
		{"an approver", as("key_p", Approver), map[string]bool{"key_a": true, "": true}, "", false},
		{"a runner", as("key_a", Runner), map[string]bool{"key_a": true, "key_b": false, "": false}, "key_a", true},
		{"a runner without an id", as("", Runner), map[string]bool{"": false}, "", true},
	} {
		for owner, want := range c.sees {
			if got := Sees(c.ctx, owner); got != want {
				t.Errorf("%s sees what %q owns: %v, want %v", c.name, owner, got, want)
			}
		}
		if owner, scoped := Scope(c.ctx); owner != c.scope || scoped != c.scoped {
			t.Errorf("%s lists %q (scoped %v), want %q (%v)", c.name, owner, scoped, c.scope, c.scoped)
		}
	}
	if KeyID(as("key_a", Runner)) != "key_a" || KeyID(context.Background()) != "" {
		t.Error("KeyID")
	}
}
