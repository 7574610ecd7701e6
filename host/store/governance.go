package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/uptrace/bun"
)

// Approval is a row of the approvals table.
type Approval struct {
	bun.BaseModel `bun:"table:approvals"`
	ID            string         `bun:"id,pk"`
	State         string         `bun:"state,notnull"`
	PID           *int64         `bun:"pid"`
	ServiceID     string         `bun:"service_id,notnull"`
	ToolID        string         `bun:"tool_id,notnull"`
	Parameters    map[string]any `bun:"parameters,type:text,notnull"`
	CreatedAt     time.Time      `bun:"created_at,notnull"`
	ExpiresAt     time.Time      `bun:"expires_at,notnull"`
	DecidedAt     *time.Time     `bun:"decided_at"`
	KeyID         string         `bun:"key_id,notnull"`     // the key that owns the execution that asked
	DecidedBy     string         `bun:"decided_by,notnull"` // the key that decided it; "": expired, or no key
}

// InsertApproval stores a new approval.
func (s *Store) InsertApproval(ctx context.Context, a *Approval) error {
	if _, err := s.DB.NewInsert().Model(a).Exec(ctx); err != nil {
		return fmt.Errorf("insert approval: %w", err)
	}
	return nil
}

// GetApproval reads one approval.
func (s *Store) GetApproval(ctx context.Context, id string) (*Approval, error) {
	a := new(Approval)
	if !keyable(id) {
		return nil, fmt.Errorf("approval %q: %w", id, ErrNotFound)
	}
	return one(a, s.DB.NewSelect().Model(a).Where("id = ?", id).Scan(ctx), "approval %s", id)
}

// DecideApproval moves a pending approval to state, decided by the key
// decidedBy ("": expired, or no key); false when it was not pending
// (decided already, or unknown).
func (s *Store) DecideApproval(ctx context.Context, id, state, decidedBy string, at time.Time) (bool, error) {
	if !keyable(id) {
		return false, nil
	}
	res, err := s.DB.NewUpdate().Model((*Approval)(nil)).Set("state = ?", state).Set("decided_at = ?", at).
		Set("decided_by = ?", decidedBy).Where("id = ?", id).Where("state = 'pending'").Exec(ctx)
	if err != nil {
		return false, fmt.Errorf("decide approval %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// ExpirePendingApprovals expires every pending approval (at start-up: the
// calls that waited on them ended with the previous host).
func (s *Store) ExpirePendingApprovals(ctx context.Context, at time.Time) (int64, error) {
	res, err := s.DB.NewUpdate().Model((*Approval)(nil)).Set("state = 'expired'").Set("decided_at = ?", at).
		Where("state = 'pending'").Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("expire approvals: %w", err)
	}
	return res.RowsAffected()
}

// ApprovalFilter selects approvals, newest first.
type ApprovalFilter struct {
	State  string
	PID    int64
	Before string // id of the last item of the previous page
	Limit  int
}

// ListApprovals lists approvals, newest first (ids sort by creation).
func (s *Store) ListApprovals(ctx context.Context, f ApprovalFilter) ([]Approval, error) {
	var out []Approval
	q := s.DB.NewSelect().Model(&out).Order("id DESC").Limit(int64(f.Limit))
	if f.State != "" {
		q = q.Where("state = ?", f.State)
	}
	if f.PID > 0 {
		q = q.Where("pid = ?", f.PID)
	}
	if f.Before != "" {
		q = q.Where("id < ?", f.Before)
	}
	if err := q.Scan(ctx); err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	return out, nil
}

// PruneApprovals deletes decided approvals beyond the newest keep (0: no
// count bound) and those created before before (zero: no age bound).
// Pending approvals have calls waiting on them and are never deleted.
func (s *Store) PruneApprovals(ctx context.Context, keep int64, before time.Time) error {
	if keep > 0 {
		var cut string
		err := s.DB.NewSelect().Model((*Approval)(nil)).Column("id").Where("state <> 'pending'").
			Order("id DESC").Offset(keep).Limit(1).Scan(ctx, &cut)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("prune approvals: %w", err)
		}
		if cut != "" {
			// Ids sort by creation time.
			err := s.deleteBatches(ctx, (*Approval)(nil), func(q *bun.SelectQuery) *bun.SelectQuery {
				return q.Where("state <> 'pending'").Where("id <= ?", cut).Order("id")
			})
			if err != nil {
				return fmt.Errorf("prune approvals: %w", err)
			}
		}
	}
	if !before.IsZero() {
		err := s.deleteBatches(ctx, (*Approval)(nil), func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("state <> 'pending'").Where("created_at < ?", before)
		})
		if err != nil {
			return fmt.Errorf("prune approvals: %w", err)
		}
	}
	return nil
}

// ToolCall is a row of the tool_calls table: the audit.
type ToolCall struct {
	bun.BaseModel `bun:"table:tool_calls"`
	ID            int64          `bun:"id,pk,autoincrement"`
	At            time.Time      `bun:"at,notnull"`
	PID           *int64         `bun:"pid"`
	ServiceID     string         `bun:"service_id,notnull"`
	ToolID        string         `bun:"tool_id,notnull"`
	Policy        string         `bun:"policy,notnull"`
	ApprovalID    *string        `bun:"approval_id"`
	Outcome       string         `bun:"outcome,notnull"`
	Status        *int           `bun:"status"`
	DurationMs    float64        `bun:"duration_ms,notnull"`
	Parameters    map[string]any `bun:"parameters,type:text,notnull"`
	Source        string         `bun:"source,notnull"`
	KeyID         string         `bun:"key_id,notnull"` // the key behind the call; "": no key
}

// InsertToolCalls stores a batch of audit records in one statement.
func (s *Store) InsertToolCalls(ctx context.Context, calls []ToolCall) error {
	if len(calls) == 0 {
		return nil
	}
	// No RETURNING of the ids: nobody reads them back, and without it the
	// insert is a plain statement rather than a query with rows to scan.
	if _, err := s.DB.NewInsert().Model(&calls).Returning("NULL").Exec(ctx); err != nil {
		return fmt.Errorf("insert tool calls: %w", err)
	}
	return nil
}

// ToolCallFilter selects audit records, newest first.
type ToolCallFilter struct {
	ServiceID, ToolID, Outcome string
	PID                        int64
	BeforeID                   int64
	Limit                      int
}

// ListToolCalls lists audit records, newest first.
func (s *Store) ListToolCalls(ctx context.Context, f ToolCallFilter) ([]ToolCall, error) {
	var out []ToolCall
	q := s.DB.NewSelect().Model(&out).Order("id DESC").Limit(int64(f.Limit))
	if f.ServiceID != "" {
		q = q.Where("service_id = ?", f.ServiceID)
	}
	if f.ToolID != "" {
		q = q.Where("tool_id = ?", f.ToolID)
	}
	if f.Outcome != "" {
		q = q.Where("outcome = ?", f.Outcome)
	}
	if f.PID > 0 {
		q = q.Where("pid = ?", f.PID)
	}
	if f.BeforeID > 0 {
		q = q.Where("id < ?", f.BeforeID)
	}
	if err := q.Scan(ctx); err != nil {
		return nil, fmt.Errorf("list tool calls: %w", err)
	}
	return out, nil
}

// PruneToolCalls keeps at most keep records (the newest) and none older
// than before (zero: no age bound).
func (s *Store) PruneToolCalls(ctx context.Context, keep int64, before time.Time) error {
	if err := s.pruneLog(ctx, (*ToolCall)(nil), keep, before); err != nil {
		return fmt.Errorf("prune tool calls: %w", err)
	}
	return nil
}

// pruneLog bounds a table that only grows, whose rows have an increasing
// id and an "at" time: at most keep rows (the newest; 0: no count bound),
// none older than before (zero: no age bound).
func (s *Store) pruneLog(ctx context.Context, model any, keep int64, before time.Time) error {
	if keep > 0 {
		var cut int64
		err := s.DB.NewSelect().Model(model).Column("id").Order("id DESC").Offset(keep).Limit(1).Scan(ctx, &cut)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if cut > 0 {
			err := s.deleteBatches(ctx, model, func(q *bun.SelectQuery) *bun.SelectQuery {
				return q.Where("id <= ?", cut).Order("id")
			})
			if err != nil {
				return err
			}
		}
	}
	if !before.IsZero() {
		return s.deleteBatches(ctx, model, func(q *bun.SelectQuery) *bun.SelectQuery {
			return q.Where("at < ?", before)
		})
	}
	return nil
}

// deleteBatch is how many rows one statement of a prune deletes: SQLite has
// one writer, and a statement holds it, and every execution's rows, for as
// long as it runs.
const deleteBatch = 500

// deleteBatches deletes the rows of model's table (keyed by id) that
// where selects, deleteBatch a statement, until a statement deletes fewer.
func (s *Store) deleteBatches(ctx context.Context, model any, where func(*bun.SelectQuery) *bun.SelectQuery) error {
	for {
		ids := where(s.DB.NewSelect().Model(model).Column("id")).Limit(deleteBatch)
		res, err := s.DB.NewDelete().Model(model).Where("id IN (?)", ids).Exec(ctx)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n < deleteBatch {
			return nil
		}
	}
}

// ExpireOrphanApprovals expires the pending approvals nobody waits on any
// more when several hosts share the database: those past their expiry
// (their host did not live to expire them) and those of processes no
// longer live (finished, host_lost included, or deleted). The approvals
// other hosts' live calls wait on are left alone.
func (s *Store) ExpireOrphanApprovals(ctx context.Context, at time.Time) (int64, error) {
	res, err := s.DB.NewUpdate().Model((*Approval)(nil)).Set("state = 'expired'").Set("decided_at = ?", at).
		Where("state = 'pending'").
		WhereGroup(" AND ", func(q *bun.UpdateQuery) *bun.UpdateQuery {
			return q.Where("expires_at < ?", at).
				WhereOr("pid IS NOT NULL AND NOT EXISTS (SELECT 1 FROM processes p WHERE p.pid = approval.pid AND p.state <> 'idle')")
		}).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("expire orphan approvals: %w", err)
	}
	return res.RowsAffected()
}
