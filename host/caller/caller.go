// Package caller names who makes a request: the id of the API key that
// authenticated it and the roles that key holds (DESIGN §13 "Keys and
// roles"). The API layer puts the caller into the request's context; domain
// packages read it to record who did what and to scope what a key sees.
package caller

import (
	"context"
	"slices"
)

// Role is what a key may do.
type Role string

// The three roles of DESIGN §13.
const (
	// Runner runs code and uses tools as policies allow, and sees only what
	// it owns.
	Runner Role = "runner"
	// Approver decides approvals and reads the audit and every process.
	Approver Role = "approver"
	// Admin may do everything.
	Admin Role = "admin"
)

// Roles lists every role, in the order the docs name them.
var Roles = []Role{Runner, Approver, Admin}

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool { return slices.Contains(Roles, r) }

// Caller is an authenticated key.
type Caller struct {
	KeyID string
	Roles []Role
}

// Has reports whether the caller holds role r; an admin holds every role.
func (c Caller) Has(r Role) bool {
	return slices.Contains(c.Roles, Admin) || slices.Contains(c.Roles, r)
}

// SeesAll reports whether the caller may read what other keys own: admins
// and approvers may, runners see only their own processes and sessions.
func (c Caller) SeesAll() bool { return c.Has(Approver) }

type ctxKey struct{}

// With returns ctx carrying c.
func With(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// From returns the caller ctx carries. None means the host itself acts
// (recovery, retention, a server without authentication): nothing is scoped.
func From(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(ctxKey{}).(Caller)
	return c, ok
}

// Sees reports whether the caller ctx carries may read what the key owner
// owns: the host itself, admins and approvers read everything, a runner
// only what its own key owns.
func Sees(ctx context.Context, owner string) bool {
	c, ok := From(ctx)
	return !ok || c.SeesAll() || (c.KeyID != "" && c.KeyID == owner)
}

// Scope is the owner a listing for the caller ctx carries is limited to:
// its own key for a runner (scoped), nothing for everyone else.
func Scope(ctx context.Context) (owner string, scoped bool) {
	c, ok := From(ctx)
	if !ok || c.SeesAll() {
		return "", false
	}
	return c.KeyID, true
}

// KeyID is the key id of the caller ctx carries; "" when the host acts
// itself.
func KeyID(ctx context.Context) string {
	c, _ := From(ctx)
	return c.KeyID
}
