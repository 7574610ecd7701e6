// Package changes is the record of configuration changes (GET /changes):
// what changed, when, and which key changed it. The control plane and the
// managers of policies and keys record each change they make; the record
// is bounded like the audit (retention.Bounds), by default to the newest
// 10,000 changes and a year.
package changes

import (
	"context"
	"log/slog"
	"time"

	"github.com/cyrnel/cyrnel/host/caller"
	"github.com/cyrnel/cyrnel/host/lifecycle"
	"github.com/cyrnel/cyrnel/host/retention"
	"github.com/cyrnel/cyrnel/host/store"
)

// HostActor is the keyId of a change no key made: the host acting on its
// own (a server without authentication, start-up).
const HostActor = "host"

// Change is a recorded configuration change.
type Change struct {
	ID     int64
	At     time.Time
	KeyID  string
	Action string
	Target string
	Detail map[string]any
}

// ListInput pages through changes, newest first.
type ListInput struct {
	BeforeID int64
	Limit    int
}

// Store is what the record needs of the database.
type Store interface {
	InsertChange(ctx context.Context, c *store.Change) error
	ListChanges(ctx context.Context, f store.ChangeFilter) ([]store.Change, error)
	PruneChanges(ctx context.Context, keep int64, before time.Time) error
}

// Log records changes and keeps the record bounded.
type Log struct {
	log   *slog.Logger
	st    Store
	opts  Options
	prune lifecycle.Loop
}

// Defaults of the record's bounds.
const (
	DefaultMaxRecords = 10000
	DefaultMaxAge     = 365 * 24 * time.Hour
)

// Options bound the record.
type Options struct {
	// Bounds (defaults: DefaultMaxRecords, DefaultMaxAge).
	retention.Bounds
	// Now is the clock changes are stamped and pruned by (nil: time.Now).
	Now func() time.Time
}

// New returns a record; its pruning runs from Start to Stop.
func New(log *slog.Logger, st Store, opts Options) *Log {
	if opts.MaxRecords == 0 {
		opts.MaxRecords = DefaultMaxRecords
	}
	if opts.MaxAge == 0 {
		opts.MaxAge = DefaultMaxAge
	}
	opts.Bounds = opts.WithDefaults()
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Log{log: log, st: st, opts: opts}
}

// Start starts the pruning, which applies the bounds at once and then
// every PruneEvery.
func (l *Log) Start(ctx context.Context) error { return l.prune.Start(ctx, l.pruneLoop) }

// Stop stops the pruning and waits for it.
func (l *Log) Stop(ctx context.Context) error { return l.prune.Stop(ctx) }

func (l *Log) pruneLoop(ctx context.Context) {
	t := time.NewTicker(l.opts.PruneEvery)
	defer t.Stop()
	for {
		l.opts.Apply(l.log, "changes", l.opts.Now(), l.st.PruneChanges)
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}

// Record stores a change made by the key in ctx. The change itself is
// already made: a failure to record it is logged, not returned.
func (l *Log) Record(ctx context.Context, action, target string, detail map[string]any) {
	keyID := HostActor
	if c, ok := caller.From(ctx); ok {
		keyID = c.KeyID
	}
	if detail == nil {
		detail = map[string]any{}
	}
	row := &store.Change{At: l.opts.Now().UTC(), KeyID: keyID, Action: action, Target: target, Detail: detail}
	if err := l.st.InsertChange(context.WithoutCancel(ctx), row); err != nil {
		l.log.Error("record a configuration change", "action", action, "target", target, "key", keyID, "err", err)
	}
}

// List lists changes, newest first; more says another page follows.
func (l *Log) List(ctx context.Context, in ListInput) ([]Change, bool, error) {
	rows, err := l.st.ListChanges(ctx, store.ChangeFilter{BeforeID: in.BeforeID, Limit: in.Limit + 1})
	if err != nil {
		return nil, false, err
	}
	more := len(rows) > in.Limit
	if more {
		rows = rows[:in.Limit]
	}
	out := make([]Change, len(rows))
	for i, r := range rows {
		out[i] = Change{ID: r.ID, At: r.At, KeyID: r.KeyID, Action: r.Action, Target: r.Target, Detail: r.Detail}
	}
	return out, more, nil
}
