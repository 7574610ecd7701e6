package process

import (
	"context"
	"time"

	"github.com/cyrnel/cyrnel/host/store"
)

// Retention bounds the finished processes kept, with their files: none
// older than MaxAge (negative: no age bound), and no more than MaxBytes of
// stored processes, the newest kept (negative: no size bound). Live
// processes are never pruned.
type Retention struct {
	MaxAge   time.Duration
	MaxBytes int64
}

// DefaultRetention keeps 30 days and 1 GiB of processes.
func DefaultRetention() Retention {
	return Retention{MaxAge: 30 * 24 * time.Hour, MaxBytes: 1 << 30}
}

// PruneEvery is how often the retention bounds are applied.
const PruneEvery = time.Minute

// pruneBatch is how many processes one write of a prune deletes: the
// writer commits executions' rows between two batches.
const pruneBatch = 500

// pruneEvery applies the retention bounds at start-up, then every
// PruneEvery, until ctx ends (Stop).
func (m *Manager) pruneEvery(ctx context.Context) {
	t := time.NewTicker(PruneEvery)
	defer t.Stop()
	for {
		m.prune(ctx)
		if m.afterPrune != nil {
			m.afterPrune()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// prune applies the retention bounds: where they cut is read outside the
// writer, then the processes past it are deleted through the writer a batch
// at a time, and the room goes back to the file system. A failure is logged
// and tried again at the next round.
func (m *Manager) prune(ctx context.Context) {
	keep := m.limits.Keep
	var before time.Time
	if keep.MaxAge > 0 {
		before = m.now().Add(-keep.MaxAge)
	}
	// A round is bounded like the pace it keeps: one that cannot finish
	// (a database that stopped answering) gives way to the next.
	round, cancel := context.WithTimeout(ctx, PruneEvery)
	defer cancel()
	cut, err := m.st.RetentionCut(round, max(keep.MaxBytes, 0), before)
	if err != nil {
		if ctx.Err() == nil { // not the host stopping
			m.log.Warn("find finished processes past the retention bounds", "err", err)
		}
		return
	}
	var n int64
	for !cut.None() && round.Err() == nil {
		var k int64
		err := m.w.do(func(ctx context.Context, tx *store.Tx) (err error) {
			k, err = tx.PruneProcesses(ctx, cut, pruneBatch)
			return err
		})
		if err != nil {
			m.log.Warn("prune finished processes", "err", err)
			break
		}
		n += k
		if k < pruneBatch {
			break
		}
	}
	if n > 0 {
		m.log.Info("pruned finished processes past the retention bounds", "count", n)
	}
	m.reclaim(round)
}

// reclaim gives the room of deleted rows back to the file system, unless
// ctx has ended (the host stops: the next start does it).
func (m *Manager) reclaim(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	if err := m.st.Reclaim(ctx); err != nil && ctx.Err() == nil {
		m.log.Warn("give deleted processes' room back", "err", err)
	}
}
