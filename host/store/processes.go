package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
)

// Process is a row of the processes table.
type Process struct {
	bun.BaseModel `bun:"table:processes"`

	PID             int64          `bun:"pid,pk,autoincrement"`
	Ref             string         `bun:"ref,notnull"`
	Code            string         `bun:"code,notnull"`
	State           string         `bun:"state,notnull"`
	ExitState       *string        `bun:"exit_state"`
	Reason          string         `bun:"reason,notnull"`
	Error           string         `bun:"error,notnull"`
	TimeoutMs       int64          `bun:"timeout_ms,notnull"`
	EnvConfig       map[string]any `bun:"env_config,type:text"`
	Environment     string         `bun:"environment,notnull"`
	Output          map[string]any `bun:"output,type:text"`
	Stdout          string         `bun:"stdout,notnull"`
	Stderr          string         `bun:"stderr,notnull"`
	StdoutTruncated bool           `bun:"stdout_truncated,notnull"`
	StderrTruncated bool           `bun:"stderr_truncated,notnull"`
	OutputTruncated bool           `bun:"output_truncated,notnull"`
	Runs            int64          `bun:"runs,notnull"`
	HostID          string         `bun:"host_id,notnull"` // the host that runs it`
	CreatedAt       time.Time      `bun:"created_at,notnull"`
	StartedAt       *time.Time     `bun:"started_at"`
	FinishedAt      *time.Time     `bun:"finished_at"`
	DurationMs      *int64         `bun:"duration_ms"`
}

// InsertProcess stores p and fills in its pid.
func (s *Store) InsertProcess(ctx context.Context, p *Process) error {
	if _, err := s.DB.NewInsert().Model(p).Returning("pid").Exec(s.hot(ctx)); err != nil {
		return fmt.Errorf("insert process: %w", err)
	}
	return nil
}

// GetProcess reads one process.
func (s *Store) GetProcess(ctx context.Context, pid int64) (*Process, error) {
	p := new(Process)
	err := s.DB.NewSelect().Model(p).Where("pid = ?", pid).Scan(ctx)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("process %d: %w", pid, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get process %d: %w", pid, err)
	}
	return p, nil
}

// ProcessFilter selects processes for ListProcesses.
type ProcessFilter struct {
	State     string
	ExitState string
	Ref       string
	BeforePID int64 // 0: from the newest
	Limit     int64
}

// ListProcesses returns processes newest first, without their code and
// streams (a list is an index, not a dump).
func (s *Store) ListProcesses(ctx context.Context, f ProcessFilter) ([]Process, error) {
	var ps []Process
	q := s.DB.NewSelect().Model(&ps).
		ExcludeColumn("code", "stdout", "stderr", "output").
		OrderExpr("pid DESC").Limit(f.Limit)
	if f.State != "" {
		q = q.Where("state = ?", f.State)
	}
	if f.ExitState != "" {
		q = q.Where("exit_state = ?", f.ExitState)
	}
	if f.Ref != "" {
		q = q.Where("ref = ?", f.Ref)
	}
	if f.BeforePID > 0 {
		q = q.Where("pid < ?", f.BeforePID)
	}
	if err := q.Scan(ctx); err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	return ps, nil
}

// TransitionProcess writes the given columns of p only if the stored state is
// one of from: the compare-and-set that keeps a late event from overwriting a
// final state. It reports whether the row changed.
func (s *Store) TransitionProcess(ctx context.Context, p *Process, from []string, columns ...string) (bool, error) {
	res, err := s.DB.NewUpdate().Model(p).Column(columns...).
		Where("pid = ?", p.PID).Where("state IN (?)", bun.In(from)).Exec(s.hot(ctx))
	if err != nil {
		return false, fmt.Errorf("update process %d: %w", p.PID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("update process %d: %w", p.PID, err)
	}
	return n == 1, nil
}

// DeleteProcess removes a process if its state is one of from.
func (s *Store) DeleteProcess(ctx context.Context, pid int64, from []string) (bool, error) {
	res, err := s.DB.NewDelete().Model((*Process)(nil)).
		Where("pid = ?", pid).Where("state IN (?)", bun.In(from)).Exec(ctx)
	if err != nil {
		return false, fmt.Errorf("delete process %d: %w", pid, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("delete process %d: %w", pid, err)
	}
	return n == 1, nil
}

// FinishAll moves every process of hostID in one of the from states to idle
// with the given exit state and reason; used at start-up for what this host
// left behind before it stopped. Hosts sharing a database leave each
// other's processes alone.
func (s *Store) FinishAll(ctx context.Context, hostID string, from []string, exitState, reason, msg string, at time.Time) (int64, error) {
	res, err := s.DB.NewUpdate().Model((*Process)(nil)).
		Set("state = ?", "idle").Set("exit_state = ?", exitState).
		Set("reason = ?", reason).Set("error = ?", msg).Set("finished_at = ?", at).
		Where("state IN (?)", bun.In(from)).Where("host_id IN (?)", bun.In([]string{hostID, ""})).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("finish processes: %w", err)
	}
	return res.RowsAffected()
}
