package store

import (
	"context"
	"fmt"
	"time"

	"github.com/uptrace/bun"
)

// Session is a row of the sessions table: a long-lived interpreter that
// keeps state between the executions run in it.
type Session struct {
	bun.BaseModel `bun:"table:sessions"`

	ID            string         `bun:"id,pk"`
	Module        string         `bun:"module,notnull"`
	State         string         `bun:"state,notnull"`
	Ref           string         `bun:"ref,notnull"`
	EnvConfig     map[string]any `bun:"env_config,type:text"`
	IdleTimeoutMs int64          `bun:"idle_timeout_ms,notnull"`
	MaxLifetimeMs int64          `bun:"max_lifetime_ms,notnull"`
	HostID        string         `bun:"host_id,notnull"`
	CreatedAt     time.Time      `bun:"created_at,notnull"`
	LastUsedAt    time.Time      `bun:"last_used_at,notnull"`
	EndedAt       *time.Time     `bun:"ended_at"`
	EndReason     string         `bun:"end_reason,notnull"`
	CPUMs         *int64         `bun:"cpu_ms"`
	MemoryBytes   *int64         `bun:"memory_bytes"`
	Owner         string         `bun:"owner,notnull"` // the key id that created it; "": no key (DESIGN §13)
}

// SessionEnded is the state of a session whose interpreter is gone.
const SessionEnded = "ended"

// InsertSession stores a new session.
func (s *Store) InsertSession(ctx context.Context, ses *Session) error {
	if _, err := s.DB.NewInsert().Model(ses).Exec(ctx); err != nil {
		return s.classify(fmt.Errorf("insert session: %w", err))
	}
	return nil
}

// UpdateSession writes the given columns of a session that has not ended
// and reports whether it did: an ended session never changes again.
func (s *Store) UpdateSession(ctx context.Context, ses *Session, columns ...string) (bool, error) {
	res, err := s.DB.NewUpdate().Model(ses).Column(columns...).WherePK().Where("state <> ?", SessionEnded).Exec(ctx)
	if err != nil {
		return false, s.classify(fmt.Errorf("update session %s: %w", ses.ID, err))
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// GetSession reads one session.
func (s *Store) GetSession(ctx context.Context, id string) (*Session, error) {
	ses := &Session{}
	if !keyable(id) {
		return nil, fmt.Errorf("session %q: %w", id, ErrNotFound)
	}
	return one(ses, s.DB.NewSelect().Model(ses).Where("id = ?", id).Scan(ctx), "session %s", id)
}

// SessionFilter selects sessions: newest first, after the cursor (a
// creation time and id), in state and of owner when set.
type SessionFilter struct {
	State      string
	Owner      string
	Limit      int
	BeforeTime *time.Time
	BeforeID   string
}

// ListSessions lists sessions newest first.
func (s *Store) ListSessions(ctx context.Context, f SessionFilter) ([]Session, error) {
	var out []Session
	q := s.DB.NewSelect().Model(&out).OrderExpr("created_at DESC, id DESC").Limit(int64(f.Limit))
	if f.State != "" {
		q = q.Where("state = ?", f.State)
	}
	if f.Owner != "" {
		q = q.Where("owner = ?", f.Owner).Where("owner <> ''")
	}
	if f.BeforeTime != nil {
		q = q.Where("(created_at < ? OR (created_at = ? AND id < ?))", *f.BeforeTime, *f.BeforeTime, f.BeforeID)
	}
	if err := q.Scan(ctx); err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	return out, nil
}

// EndHostSessions ends every session hostID left open (its interpreters
// died with it), at start-up.
func (s *Store) EndHostSessions(ctx context.Context, hostID, reason string, at time.Time) (int64, error) {
	res, err := s.DB.NewUpdate().Model((*Session)(nil)).
		Set("state = ?", SessionEnded).Set("end_reason = ?", reason).Set("ended_at = ?", at).
		Where("state <> ?", SessionEnded).Where("host_id = ?", hostID).Exec(ctx)
	if err != nil {
		return 0, fmt.Errorf("end sessions: %w", err)
	}
	return res.RowsAffected()
}

// ProcessFile is a file a one-shot program left in its workspace, kept
// with its process (deleted with it).
type ProcessFile struct {
	bun.BaseModel `bun:"table:process_files"`

	PID        int64     `bun:"pid,pk"`
	Path       string    `bun:"path,pk"`
	Size       int64     `bun:"size,notnull"`
	ModifiedAt time.Time `bun:"modified_at,notnull"`
	Content    []byte    `bun:"content,notnull"`
}

// ReplaceProcessFiles stores the files of a process's latest execution in
// place of those of earlier ones.
func (t *Tx) ReplaceProcessFiles(ctx context.Context, pid int64, files []ProcessFile) error {
	if _, err := t.db.NewDelete().Model((*ProcessFile)(nil)).Where("pid = ?", pid).Exec(ctx); err != nil {
		return fmt.Errorf("replace files of process %d: %w", pid, err)
	}
	if len(files) == 0 {
		return nil
	}
	if _, err := t.db.NewInsert().Model(&files).Exec(ctx); err != nil {
		return fmt.Errorf("store files of process %d: %w", pid, err)
	}
	return nil
}

// ListProcessFiles lists a process's files, without their content.
func (s *Store) ListProcessFiles(ctx context.Context, pid int64) ([]ProcessFile, error) {
	var out []ProcessFile
	if err := s.DB.NewSelect().Model(&out).ExcludeColumn("content").Where("pid = ?", pid).Order("path").Scan(ctx); err != nil {
		return nil, fmt.Errorf("list files of process %d: %w", pid, err)
	}
	return out, nil
}

// GetProcessFile reads one file of a process.
func (s *Store) GetProcessFile(ctx context.Context, pid int64, path string) (*ProcessFile, error) {
	f := &ProcessFile{}
	if !keyable(path) {
		return nil, fmt.Errorf("file %q of process %d: %w", path, pid, ErrNotFound)
	}
	return one(f, s.DB.NewSelect().Model(f).Where("pid = ? AND path = ?", pid, path).Scan(ctx), "file %s of process %d", path, pid)
}
