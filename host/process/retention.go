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

// prune applies the retention bounds through the writer, then gives the
// room back to the file system; a failure is logged and tried again at the
// next round.
func (m *Manager) prune() {
	keep := m.limits.Keep
	var before time.Time
	if keep.MaxAge > 0 {
		before = m.now().Add(-keep.MaxAge)
	}
	var n int64
	err := m.w.do(func(ctx context.Context, tx *store.Tx) (err error) {
		n, err = tx.PruneProcesses(ctx, max(keep.MaxBytes, 0), before)
		return err
	})
	if err != nil {
		m.log.Warn("prune finished processes", "err", err)
		return
	}
	if n > 0 {
		m.log.Info("pruned finished processes past the retention bounds", "count", n)
	}
	m.reclaim()
}

// reclaim gives the room of deleted rows back to the file system.
func (m *Manager) reclaim() {
	ctx, cancel := context.WithTimeout(m.ctx, writeTimeout)
	defer cancel()
	if err := m.st.Reclaim(ctx); err != nil {
		m.log.Warn("give deleted processes' room back", "err", err)
	}
}
