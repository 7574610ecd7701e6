package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
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

// The two writes every execution makes (InsertProcess and FinishProcess)
// are prepared statements: bun inlines arguments, so each statement would
// be parsed anew, which on SQLite was a third of each write's cost. Their
// arguments are encoded as bun encodes them, so bun reads the rows back
// unchanged.
const processColumns = `ref, code, state, exit_state, reason, error, timeout_ms,
 env_config, environment, output, stdout, stderr, stdout_truncated, stderr_truncated, output_truncated,
 runs, host_id, created_at, started_at, finished_at, duration_ms`

// The two inserts, with the pid given or assigned; one placeholder a column.
var (
	insertWithPID = "INSERT INTO processes (pid, " + processColumns + ") VALUES (?" + strings.Repeat(", ?", 21) + ")"
	insertNewPID  = "INSERT INTO processes (" + processColumns + ") VALUES (?" + strings.Repeat(", ?", 20) + ") RETURNING pid"
)

// InsertProcess stores p. A pid from ReservePID is kept; otherwise one is
// assigned and filled in.
func (s *Store) InsertProcess(ctx context.Context, p *Process) error {
	if p.PID == 0 && s.local {
		pid, _, err := s.ReservePID(ctx)
		if err != nil {
			return fmt.Errorf("insert process: %w", err)
		}
		p.PID = pid
	}
	envConfig, err := jsonText(p.EnvConfig)
	if err != nil {
		return fmt.Errorf("insert process: env config: %w", err)
	}
	output, err := jsonText(p.Output)
	if err != nil {
		return fmt.Errorf("insert process: output: %w", err)
	}
	args := []any{p.Ref, p.Code, p.State, p.ExitState, p.Reason, p.Error, p.TimeoutMs,
		envConfig, p.Environment, output, p.Stdout, p.Stderr, p.StdoutTruncated, p.StderrTruncated, p.OutputTruncated,
		p.Runs, p.HostID, s.timeArg(&p.CreatedAt), s.timeArg(p.StartedAt), s.timeArg(p.FinishedAt), p.DurationMs}
	if p.PID > 0 {
		if !s.local {
			return fmt.Errorf("insert process %d: PostgreSQL assigns pids itself", p.PID)
		}
		stmt, err := s.prepared(ctx, insertWithPID)
		if err == nil {
			_, err = stmt.ExecContext(s.hot(ctx), append([]any{p.PID}, args...)...)
		}
		if err != nil {
			return fmt.Errorf("insert process %d: %w", p.PID, err)
		}
		return nil
	}
	stmt, err := s.prepared(ctx, insertNewPID)
	if err == nil {
		err = stmt.QueryRowContext(s.hot(ctx), args...).Scan(&p.PID)
	}
	if err != nil {
		return fmt.Errorf("insert process: %w", err)
	}
	return nil
}

// pidBlock is the size of the ranges of pids ReservePID takes at a time.
const pidBlock = 128

// pidRange is the part of a reserved range not handed out yet.
type pidRange struct {
	mu        sync.Mutex
	next, end int64 // next <= end: next is free
}

// ReservePID hands out a pid before its process is inserted, so an
// execution can start first and its row be written once (ok is false where
// the database assigns pids itself: PostgreSQL). On SQLite pids come from
// ranges reserved in AUTOINCREMENT's own sequence, so they stay unique and
// never reused even across restarts and processes sharing the file; the
// rest of a range is skipped when the host stops.
func (s *Store) ReservePID(ctx context.Context) (pid int64, ok bool, err error) {
	if !s.local {
		return 0, false, nil
	}
	s.pids.mu.Lock()
	defer s.pids.mu.Unlock()
	if s.pids.next == 0 || s.pids.next > s.pids.end {
		var end int64
		err := s.DB.RunInTx(s.hot(ctx), nil, func(ctx context.Context, tx bun.Tx) error {
			if _, err := tx.ExecContext(ctx, `INSERT INTO sqlite_sequence (name, seq) SELECT 'processes', 0
 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'processes')`); err != nil {
				return err
			}
			return tx.QueryRowContext(ctx, `UPDATE sqlite_sequence
 SET seq = max(seq, (SELECT coalesce(max(pid), 0) FROM processes)) + ? WHERE name = 'processes' RETURNING seq`, pidBlock).Scan(&end)
		})
		if err != nil {
			return 0, false, fmt.Errorf("reserve pids: %w", err)
		}
		s.pids.next, s.pids.end = end-pidBlock+1, end
	}
	pid = s.pids.next
	s.pids.next++
	return pid, true, nil
}

// FinishProcess writes the result of p's execution (state, exit state,
// reason, error, environment, output, streams, their truncation flags and
// timing) only if the stored state is one of from, and reports whether the
// row changed: TransitionProcess for the write that ends every execution.
func (s *Store) FinishProcess(ctx context.Context, p *Process, from []string) (bool, error) {
	if len(from) == 0 {
		return false, fmt.Errorf("finish process %d: no state to finish it from", p.PID)
	}
	output, err := jsonText(p.Output)
	if err != nil {
		return false, fmt.Errorf("finish process %d: output: %w", p.PID, err)
	}
	stmt, err := s.prepared(ctx, `UPDATE processes SET state = ?, exit_state = ?, reason = ?, error = ?, environment = ?,
 output = ?, stdout = ?, stderr = ?, stdout_truncated = ?, stderr_truncated = ?, output_truncated = ?,
 started_at = ?, finished_at = ?, duration_ms = ?
 WHERE pid = ? AND state IN (?`+strings.Repeat(", ?", len(from)-1)+`)`)
	if err != nil {
		return false, fmt.Errorf("finish process %d: %w", p.PID, err)
	}
	args := []any{p.State, p.ExitState, p.Reason, p.Error, p.Environment,
		output, p.Stdout, p.Stderr, p.StdoutTruncated, p.StderrTruncated, p.OutputTruncated,
		s.timeArg(p.StartedAt), s.timeArg(p.FinishedAt), p.DurationMs, p.PID}
	for _, st := range from {
		args = append(args, st)
	}
	res, err := stmt.ExecContext(s.hot(ctx), args...)
	return changedOne(res, err, "finish process %d", p.PID)
}

// changedOne reports whether a write by pid changed its row.
func changedOne(res sql.Result, err error, what string, pid int64) (bool, error) {
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		return false, fmt.Errorf(what+": %w", pid, err)
	}
	return n == 1, nil
}

// jsonText encodes a JSON column's value as bun does (a nil map is "null").
func jsonText(v map[string]any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// timeArg encodes a time column's value: on SQLite as the text bun writes
// (UTC, microseconds), on PostgreSQL as a time the driver binds.
func (s *Store) timeArg(t *time.Time) any {
	switch {
	case t == nil:
		return nil
	case s.local:
		return t.UTC().Format("2006-01-02 15:04:05.999999-07:00")
	}
	return *t
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
	if err := s.listQuery(&ps, f).Scan(ctx); err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	return ps, nil
}

func (s *Store) listQuery(ps *[]Process, f ProcessFilter) *bun.SelectQuery {
	q := s.DB.NewSelect().Model(ps).
		ExcludeColumn("code", "stdout", "stderr", "output").
		OrderExpr("pid DESC").Limit(f.Limit)
	// The indexes on state and ref leave out idle processes and those with
	// no ref (most rows: every execution skips them); the repeated terms let
	// SQLite see a query is within an index.
	if f.State != "" {
		q = q.Where("state = ?", f.State)
		if f.State != "idle" {
			q = q.Where("state <> 'idle'")
		}
	}
	if f.ExitState != "" {
		q = q.Where("exit_state = ?", f.ExitState)
	}
	if f.Ref != "" {
		q = q.Where("ref = ?", f.Ref).Where("ref <> ''")
	}
	if f.BeforePID > 0 {
		q = q.Where("pid < ?", f.BeforePID)
	}
	return q
}

// TransitionProcess writes the given columns of p only if the stored state is
// one of from: the compare-and-set that keeps a late event from overwriting a
// final state. It reports whether the row changed.
func (s *Store) TransitionProcess(ctx context.Context, p *Process, from []string, columns ...string) (bool, error) {
	res, err := s.DB.NewUpdate().Model(p).Column(columns...).
		Where("pid = ?", p.PID).Where("state IN (?)", bun.In(from)).Exec(s.hot(ctx))
	return changedOne(res, err, "update process %d", p.PID)
}

// DeleteProcess removes a process if its state is one of from.
func (s *Store) DeleteProcess(ctx context.Context, pid int64, from []string) (bool, error) {
	res, err := s.DB.NewDelete().Model((*Process)(nil)).
		Where("pid = ?", pid).Where("state IN (?)", bun.In(from)).Exec(ctx)
	return changedOne(res, err, "delete process %d", pid)
}

// FinishAll moves every process of hostID in one of the from states (live
// ones: idle is never among them) to idle with the given exit state and
// reason; used at start-up for what this host
// left behind before it stopped. Hosts sharing a database leave each
// other's processes alone.
func (s *Store) FinishAll(ctx context.Context, hostID string, from []string, exitState, reason, msg string, at time.Time) (int64, error) {
	res, err := s.DB.NewUpdate().Model((*Process)(nil)).
		Set("state = ?", "idle").Set("exit_state = ?", exitState).
		Set("reason = ?", reason).Set("error = ?", msg).Set("finished_at = ?", at).
		Where("state IN (?)", bun.In(from)).Where("state <> 'idle'").
		Where("host_id IN (?)", bun.In([]string{hostID, ""})).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("finish processes: %w", err)
	}
	return res.RowsAffected()
}
