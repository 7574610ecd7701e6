package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
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
// with its process (deleted with it). Its content is in parts
// (process_file_parts); Content holds that of a row stored before parts.
type ProcessFile struct {
	bun.BaseModel `bun:"table:process_files"`

	PID        int64     `bun:"pid,pk"`
	Path       string    `bun:"path,pk"`
	Size       int64     `bun:"size,notnull"`
	ModifiedAt time.Time `bun:"modified_at,notnull"`
	Content    []byte    `bun:"content,notnull"`
}

// processFilePart is one part of a file's content.
type processFilePart struct {
	bun.BaseModel `bun:"table:process_file_parts"`

	PID  int64  `bun:"pid,pk"`
	Path string `bun:"path,pk"`
	Part int    `bun:"part,pk"`
	Data []byte `bun:"data,notnull"`
}

// FilePartBytes is the size of a stored file's parts: what a store or a
// download of a file holds in memory at once.
const FilePartBytes = 1 << 20

// ReplaceProcessFiles stores the files of a process's latest execution in
// place of those of earlier ones; content(i) reads files[i]'s content,
// which is stored a part at a time.
func (t *Tx) ReplaceProcessFiles(ctx context.Context, pid int64, files []ProcessFile, content func(i int) io.Reader) error {
	if _, err := t.db.NewDelete().Model((*processFilePart)(nil)).Where("pid = ?", pid).Exec(ctx); err != nil {
		return fmt.Errorf("replace files of process %d: %w", pid, err)
	}
	if _, err := t.db.NewDelete().Model((*ProcessFile)(nil)).Where("pid = ?", pid).Exec(ctx); err != nil {
		return fmt.Errorf("replace files of process %d: %w", pid, err)
	}
	if len(files) == 0 {
		return nil
	}
	rows := make([]ProcessFile, len(files))
	for i, f := range files {
		rows[i] = f
		rows[i].Content = []byte{}
	}
	if _, err := t.db.NewInsert().Model(&rows).Exec(ctx); err != nil {
		return fmt.Errorf("store files of process %d: %w", pid, err)
	}
	buf := make([]byte, FilePartBytes)
	for i, f := range files {
		r := content(i)
		for part := 0; ; part++ {
			n, err := io.ReadFull(r, buf)
			if n > 0 {
				row := &processFilePart{PID: pid, Path: f.Path, Part: part, Data: buf[:n]}
				if _, err := t.db.NewInsert().Model(row).Exec(ctx); err != nil {
					return fmt.Errorf("store file %s of process %d: %w", f.Path, pid, err)
				}
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("store file %s of process %d: %w", f.Path, pid, err)
			}
		}
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

// OpenProcessFile returns one file of a process, without its content, and
// a reader of its content that reads it a part at a time.
func (s *Store) OpenProcessFile(ctx context.Context, pid int64, path string) (*ProcessFile, io.Reader, error) {
	f := &ProcessFile{}
	if !keyable(path) {
		return nil, nil, fmt.Errorf("file %q of process %d: %w", path, pid, ErrNotFound)
	}
	if _, err := one(f, s.DB.NewSelect().Model(f).Where("pid = ? AND path = ?", pid, path).Scan(ctx), "file %s of process %d", path, pid); err != nil {
		return nil, nil, err
	}
	if int64(len(f.Content)) == f.Size {
		return f, bytes.NewReader(f.Content), nil // stored before parts, or empty
	}
	f.Content = nil
	return f, &partReader{ctx: ctx, s: s, pid: pid, path: path}, nil
}

// partReader reads a stored file's parts in order, one query each.
type partReader struct {
	ctx  context.Context
	s    *Store
	pid  int64
	path string
	next int
	cur  []byte
}

func (r *partReader) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		var part processFilePart
		err := r.s.DB.NewSelect().Model(&part).Where("pid = ? AND path = ? AND part = ?", r.pid, r.path, r.next).Scan(r.ctx)
		if errors.Is(err, sql.ErrNoRows) {
			return 0, io.EOF
		}
		if err != nil {
			return 0, fmt.Errorf("read file %s of process %d: %w", r.path, r.pid, err)
		}
		r.cur, r.next = part.Data, r.next+1
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	return n, nil
}
