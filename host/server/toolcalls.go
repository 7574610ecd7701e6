package server

import (
	"context"

	"github.com/cyrnel/cyrnel/host/audit"
	"github.com/cyrnel/cyrnel/host/store"
)

// toolCalls is the audit as the API lists it: the writer stores what it has
// queued before the store is read, so a client sees its own calls.
type toolCalls struct {
	w  *audit.Writer
	st audit.Lister
}

func (t toolCalls) List(ctx context.Context, f store.ToolCallFilter) ([]audit.Call, bool, error) {
	return t.w.List(ctx, t.st, f)
}
