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

	PID             int64      `bun:"pid,pk,autoincrement"`
	Ref             string     `bun:"ref,notnull"`
	Code            string     `bun:"code,notnull"`
	State           string     `bun:"state,notnull"`
	ExitState       *string    `bun:"exit_state"`
	Reason          string     `bun:"reason,notnull"`
	Error           string     `bun:"error,notnull"`
	TimeoutMs       int64      `bun:"timeout_ms,notnull"`
	EnvConfig       Object     `bun:"env_config,type:text"`
	Environment     string     `bun:"environment,notnull"`
	Output          Object     `bun:"output,type:text"`
	Stdout          string     `bun:"stdout,notnull"`
	Stderr          string     `bun:"stderr,notnull"`
	StdoutTruncated bool       `bun:"stdout_truncated,notnull"`
	StderrTruncated bool       `bun:"stderr_truncated,notnull"`
	OutputTruncated bool       `bun:"output_truncated,notnull"`
	Runs            int64      `bun:"runs,notnull"`
	HostID          string     `bun:"host_id,notnull"` // the host that runs or ran it
	CreatedAt       time.Time  `bun:"created_at,notnull"`
	StartedAt       *time.Time `bun:"started_at"`
	FinishedAt      *time.Time `bun:"finished_at"`
	DurationMs      *int64     `bun:"duration_ms"`
	CPUMs           *int64     `bun:"cpu_ms"`            // nil: unknown
	PeakMemoryBytes *int64     `bun:"peak_memory_bytes"` // nil: unknown
	Session         string     `bun:"session,notnull"`   // the session it runs in; "": its own interpreter
	Owner           string     `bun:"owner,notnull"`     // the key id that created it; "": no key (DESIGN §13)
	TraceID         string     `bun:"trace_id,notnull"`  // the latest execution's OpenTelemetry trace; "": none
	Displays        Displays   `bun:"displays,type:text,nullzero"`
}

// Display is one rich display of an execution (a MIME bundle).
type Display struct {
	Kind string            `json:"kind"`
	Data map[string]string `json:"data"`
}

// Tx is a unit of process-row writes: every write to the processes table
// goes through one, so a host can group concurrent writes into one commit
// (WriteProcesses) or make a lone write its own (WriteProcess).
type Tx struct {
	s  *Store
	db bun.IDB
	tx *sql.Tx // nil: each statement commits alone
}

// WriteProcesses runs fn in one transaction and commits it if fn returns
// nil. A full disk is reported as ErrFull.
func (s *Store) WriteProcesses(ctx context.Context, fn func(context.Context, *Tx) error) error {
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return s.classify(fmt.Errorf("begin: %w", err))
	}
	if err := fn(ctx, &Tx{s: s, db: tx, tx: tx.Tx}); err != nil {
		return errors.Join(s.classify(err), tx.Rollback())
	}
	if err := tx.Commit(); err != nil {
		return s.classify(fmt.Errorf("commit: %w", err))
	}
	return nil
}

// WriteProcess runs fn, a single write, without a transaction around it:
// each of its statements commits by itself, which on SQLite saves the BEGIN
// and COMMIT round trips on the path of a lone execution. A full disk is
// reported as ErrFull.
func (s *Store) WriteProcess(ctx context.Context, fn func(context.Context, *Tx) error) error {
	return s.classify(fn(ctx, &Tx{s: s, db: s.DB}))
}

// InsertProcess stores p and fills in the pid the database assigned.
func (t *Tx) InsertProcess(ctx context.Context, p *Process) error {
	s := t.s
	stmt, err := s.stmt(ctx, t.tx, s.insertSQL())
	if err == nil {
		args := s.args(p, s.writes.insert)
		if s.local {
			var res sql.Result
			if res, err = stmt.ExecContext(ctx, args...); err == nil {
				p.PID, err = res.LastInsertId()
			}
		} else {
			err = stmt.QueryRowContext(ctx, args...).Scan(&p.PID)
		}
	}
	if err != nil {
		return fmt.Errorf("insert process: %w", err)
	}
	return nil
}

// FinishProcess writes the result of p's execution (finishColumns: state,
// exit state, reason, error, environment, output, streams, their
// truncation flags, timing, usage and displays) only if the row is still
// that execution's (runs is p.Runs) and not yet in p's final state (so an
// execution is finished once), and reports whether the row changed: the
// write that ends every execution.
func (t *Tx) FinishProcess(ctx context.Context, p *Process) (bool, error) {
	s := t.s
	stmt, err := s.stmt(ctx, t.tx, s.finishSQL())
	if err != nil {
		return false, fmt.Errorf("finish process %d: %w", p.PID, err)
	}
	args := append(s.args(p, s.writes.finish), p.PID, p.Runs, p.State)
	res, err := stmt.ExecContext(ctx, args...)
	return changedOne(res, err, "finish process %d", p.PID)
}

// Progress is what a live execution produced since its last progress write.
type Progress struct {
	PID, Runs                                         int64  // the execution: its process and its run number
	Stdout, Stderr                                    string // appended to the stored streams
	Output                                            map[string]any
	StdoutTruncated, StderrTruncated, OutputTruncated bool
}

// AppendProgress appends an execution's new output to its row while the
// row is still live and still that execution's (runs unchanged), and
// reports whether it did. The stored streams grow by what is appended only,
// so the cost of a write is what changed, not what accumulated.
func (t *Tx) AppendProgress(ctx context.Context, p *Progress) (bool, error) {
	row := &Process{Output: p.Output, StdoutTruncated: p.StdoutTruncated, StderrTruncated: p.StderrTruncated, OutputTruncated: p.OutputTruncated}
	res, err := t.db.NewUpdate().Model(row).Column("output", "stdout_truncated", "stderr_truncated", "output_truncated").
		Set("stdout = stdout || ?", p.Stdout).Set("stderr = stderr || ?", p.Stderr).
		Where("pid = ?", p.PID).Where("runs = ?", p.Runs).
		Where("state IN ('queued', 'running', 'suspended', 'terminating')").Exec(ctx)
	return changedOne(res, err, "progress of process %d", p.PID)
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

// GetProcess reads one process.
func (s *Store) GetProcess(ctx context.Context, pid int64) (*Process, error) {
	p := new(Process)
	return one(p, s.DB.NewSelect().Model(p).Where("pid = ?", pid).Scan(ctx), "process %d", pid)
}

// ProcessFilter selects processes for ListProcesses.
type ProcessFilter struct {
	State     string
	ExitState string
	Ref       string
	Owner     string // only the processes of this runner key ("": everyone's; never the bootstrap admin key)
	BeforePID int64  // 0: from the newest
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
	// no ref (most rows: every execution skips them), and on SQLite queued
	// ones (docs/decisions.md, "Processes"); the repeated terms let SQLite
	// see a query is within an index. A listing of queued processes on
	// SQLite scans newest first: fresh executions are found at once, an old
	// process queued to run again only after the rows above it.
	if f.State != "" {
		q = q.Where("state = ?", f.State)
		if f.State != "idle" {
			q = q.Where("state <> 'idle'")
		}
		if f.State != "idle" && f.State != "queued" && s.local {
			q = q.Where("state <> 'queued'")
		}
	}
	if f.ExitState != "" {
		q = q.Where("exit_state = ?", f.ExitState)
	}
	if f.Ref != "" {
		q = q.Where("ref = ?", f.Ref).Where("ref <> ''")
	}
	if f.Owner != "" {
		// The index leaves out what the bootstrap admin key owns, whose
		// listings are never scoped (docs/decisions.md, "Owners").
		q = q.Where("owner = ?", f.Owner).Where("owner <> ''").Where("owner <> 'bootstrap'")
	}
	if f.BeforePID > 0 {
		q = q.Where("pid < ?", f.BeforePID)
	}
	return q
}

// TransitionProcess writes the given columns of p only if the stored state is
// one of from: the compare-and-set that keeps a late event from overwriting a
// final state. It reports whether the row changed.
func (t *Tx) TransitionProcess(ctx context.Context, p *Process, from []string, columns ...string) (bool, error) {
	res, err := t.db.NewUpdate().Model(p).Column(columns...).
		Where("pid = ?", p.PID).Where("state IN (?)", bun.List(from)).Exec(ctx)
	return changedOne(res, err, "update process %d", p.PID)
}

// TransitionRun is TransitionProcess for a write of one execution: it also
// needs the row to be still that execution's (runs is p.Runs), so a late
// write of a run never lands on the next run of the same process.
func (t *Tx) TransitionRun(ctx context.Context, p *Process, from []string, columns ...string) (bool, error) {
	res, err := t.db.NewUpdate().Model(p).Column(columns...).
		Where("pid = ?", p.PID).Where("runs = ?", p.Runs).Where("state IN (?)", bun.List(from)).Exec(ctx)
	return changedOne(res, err, "update process %d", p.PID)
}

// DeleteProcess removes a process if its state is one of from.
func (t *Tx) DeleteProcess(ctx context.Context, pid int64, from []string) (bool, error) {
	res, err := t.db.NewDelete().Model((*Process)(nil)).
		Where("pid = ?", pid).Where("state IN (?)", bun.List(from)).Exec(ctx)
	return changedOne(res, err, "delete process %d", pid)
}

// FinishAll moves every process of hostID in one of the from states (live
// ones: idle is never among them) to idle with the given exit state and
// reason; used at start-up for what this host
// left behind before it stopped. Hosts sharing a database leave each
// other's processes alone.
func (t *Tx) FinishAll(ctx context.Context, hostID string, from []string, exitState, reason, msg string, at time.Time) (int64, error) {
	res, err := t.db.NewUpdate().Model((*Process)(nil)).
		Set("state = ?", "idle").Set("exit_state = ?", exitState).
		Set("reason = ?", reason).Set("error = ?", msg).Set("finished_at = ?", at).
		Where("state IN (?)", bun.List(from)).Where("state <> 'idle'").
		Where("host_id IN (?)", bun.List([]string{hostID, ""})).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("finish processes: %w", err)
	}
	return res.RowsAffected()
}
