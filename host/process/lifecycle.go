package process

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/cyrnel/cyrnel/host/lifecycle"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/store"
)

// Start starts the writer, finishes what a previous host left looking
// alive, and starts flushing progress (and pruning). A second Start does
// nothing; Start after Stop fails.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopping {
		return lifecycle.ErrStopped
	}
	if m.started {
		return nil
	}
	if err := m.w.start(ctx); err != nil {
		return err
	}
	if err := m.finishLeftLive(); err != nil {
		m.w.stop()
		return err
	}
	if err := m.flusher.Start(ctx, m.flushEvery); err != nil {
		m.w.stop()
		return err
	}
	if err := m.pruner.Start(ctx, m.pruneEvery); err != nil {
		m.flusher.Stop(context.Background()) //nolint:errcheck // no deadline: it only waits
		m.w.stop()
		return err
	}
	m.started = true
	return nil
}

// flushEvery writes the progress of every live execution at each tick, each
// execution's write queued at once so the writer commits them together.
func (m *Manager) flushEvery(ctx context.Context) {
	t := time.NewTicker(m.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.mu.Lock()
		runs := slices.Collect(maps.Values(m.runs))
		m.mu.Unlock()
		var wg sync.WaitGroup
		for _, r := range runs {
			apply, ok := r.progress()
			if apply == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := m.w.do(apply); err != nil {
					m.log.WarnContext(r.logContext(), "record process progress", "pid", r.pid, "err", err)
					return
				}
				ok()
			}()
		}
		wg.Wait()
	}
}

// finishLeftLive finishes what a previous host left looking alive. Like every
// process write it is bounded by the writer's own timeout, not a caller's.
func (m *Manager) finishLeftLive() error {
	var n int64
	err := m.w.do(func(ctx context.Context, tx *store.Tx) (err error) {
		n, err = tx.FinishAll(ctx, m.host, live, string(module.ExitFailed), string(module.ReasonHostRestart),
			"the host stopped while this process was running", m.now().UTC())
		return err
	})
	if err != nil {
		return err
	}
	if n > 0 {
		m.log.Warn("finished processes left running by a previous host", "count", n)
	}
	return nil
}

// Drain refuses new executions and waits, no longer than ctx allows, for
// the running ones to end by themselves (a host leaving a cluster for a
// deploy); Stop then ends what is left.
func (m *Manager) Drain(ctx context.Context) {
	m.mu.Lock()
	m.stopping = true
	m.mu.Unlock()
	// No execution is admitted once stopping is set, so the group only
	// shrinks.
	done := make(chan struct{})
	go func() {
		m.wg.Wait()
		close(done)
	}()
	_ = lifecycle.Await(ctx, done) // past ctx, Stop ends what is left
}

// Stop refuses new executions, kills the running ones (recorded as
// canceled, reason host_shutdown), waits for their results to be stored,
// then stops writing. A second call is harmless.
func (m *Manager) Stop(ctx context.Context) error {
	m.mu.Lock()
	m.stopping = true
	m.mu.Unlock()
	m.cancel()
	done := make(chan struct{})
	go func() {
		m.pruner.Stop(context.Background())  //nolint:errcheck // no deadline: it only waits
		m.flusher.Stop(context.Background()) //nolint:errcheck // no deadline: it only waits
		m.wg.Wait()
		m.w.stop()
		close(done)
	}()
	if err := lifecycle.Await(ctx, done); err != nil {
		return fmt.Errorf("processes still stopping: %w", err)
	}
	return nil
}
