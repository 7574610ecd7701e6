// Package retention bounds a table that only grows (the audit, decided
// approvals): at most so many rows, the newest, none older than an age,
// applied at start-up and then periodically by the table's owner.
package retention

import (
	"context"
	"log/slog"
	"time"
)

// Bounds are the settings every bounded table shares, so the operator
// configures each the same way.
type Bounds struct {
	// MaxRecords keeps at most this many rows, the newest (default 100000;
	// negative: no count bound).
	MaxRecords int64
	// MaxAge drops rows older than this (default 30 days; negative: no age
	// bound).
	MaxAge time.Duration
	// PruneEvery is how often the bounds are applied (default 1 minute).
	PruneEvery time.Duration
}

// WithDefaults fills in what is unset.
func (b Bounds) WithDefaults() Bounds {
	if b.MaxRecords == 0 {
		b.MaxRecords = 100000
	}
	if b.MaxAge == 0 {
		b.MaxAge = 30 * 24 * time.Hour
	}
	if b.PruneEvery <= 0 {
		b.PruneEvery = time.Minute
	}
	return b
}

// Pruner deletes rows beyond the newest keep (0: no count bound) and those
// older than before (zero: no age bound).
type Pruner func(ctx context.Context, keep int64, before time.Time) error

// Apply prunes once to the bounds as they stand at now (the owner's
// clock), logging a failure (the next round tries again).
func (b Bounds) Apply(log *slog.Logger, what string, now time.Time, prune Pruner) {
	var before time.Time
	if b.MaxAge > 0 {
		before = now.Add(-b.MaxAge).UTC()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := prune(ctx, max(b.MaxRecords, 0), before); err != nil {
		log.Error("prune "+what, "err", err)
	}
}
