package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/workspace"
)

// Limits of the workspace routes. The workspace itself is the sandbox's
// private tmpfs, whose size is its quota.
const (
	MaxFileBytes = 8 << 20 // one file in (it travels base64 in one protocol message); out, files stream
	maxListed    = 1000
	fileTimeout  = 30 * time.Second
)

// ErrFileNotFound: no such file in the workspace (404).
var ErrFileNotFound = errors.New("file not found")

// File is one file of a workspace.
type File struct {
	Path       string
	Size       int64
	ModifiedAt time.Time
}

// do runs op in the session's goroutine, in order with its executions, if
// the caller ctx carries may see the session (Get).
func (m *Manager) do(ctx context.Context, id string, op func(context.Context, module.Session) error) error {
	ctx, cancel := context.WithTimeout(ctx, fileTimeout)
	defer cancel()
	if _, err := m.Get(ctx, id); err != nil {
		return err
	}
	j := &job{ctx: ctx, op: op, done: make(chan struct{})}
	m.mu.Lock()
	l := m.live[id]
	if l == nil || l.ended {
		m.mu.Unlock()
		row, err := m.Get(ctx, id) // as it is now that it is not live here
		if err != nil {
			return err
		}
		return unavailable(row)
	}
	select {
	case l.jobs <- j:
	default:
		m.mu.Unlock()
		return fmt.Errorf("%w: %d executions already wait", ErrBusy, cap(l.jobs))
	}
	m.mu.Unlock()
	select {
	case <-j.done:
	case <-ctx.Done():
		if j.state.CompareAndSwap(jobWaiting, jobDropped) {
			return fmt.Errorf("session %s: %w", id, ctx.Err())
		}
		<-j.done
	}
	return j.err
}

// fileError turns the runtime's answer to a file request into the host's
// errors; the runtime's words are only shown, never trusted.
func fileError(field string, err error) error {
	var fe *module.FileError
	if errors.As(err, &fe) {
		if fe.NotFound {
			return fmt.Errorf("%w: %s", ErrFileNotFound, fe.Message)
		}
		return &schema.FieldError{Field: field, Message: fe.Message}
	}
	return fmt.Errorf("workspace: %w", err)
}

// PutFile writes a file into the session's workspace.
func (m *Manager) PutFile(ctx context.Context, id, path string, data []byte) error {
	if err := workspace.ValidPath("path", path); err != nil {
		return err
	}
	if len(data) > MaxFileBytes {
		return &schema.FieldError{Field: "", Message: fmt.Sprintf("%d bytes, more than the limit of %d", len(data), MaxFileBytes)}
	}
	return m.do(ctx, id, func(ctx context.Context, ws module.Session) error {
		if err := ws.WriteFile(ctx, path, data); err != nil {
			return fileError("path", err)
		}
		return nil
	})
}

// fileReader streams a file of a session's workspace, one chunk per
// request to the runtime, each in order with the session's executions.
type fileReader struct {
	m        *Manager
	ctx      context.Context
	id, path string
	size     int64     // the file's size when it was opened
	modified time.Time // and its modification time (zero: not yet opened)
	offset   int64
	buf      []byte
}

// fileChunk is how much of a file one request reads (it travels base64 in
// one protocol message).
const fileChunk = 1 << 20

// OpenFile opens a file of the session's workspace for reading and says its
// size; the first chunk is read here, so a missing file is an error before
// any byte is sent. ctx bounds the whole read.
func (m *Manager) OpenFile(ctx context.Context, id, path string) (io.Reader, int64, error) {
	if err := workspace.ValidPath("path", path); err != nil {
		return nil, 0, err
	}
	r := &fileReader{m: m, ctx: ctx, id: id, path: path}
	if err := r.fill(); err != nil {
		return nil, 0, err
	}
	return r, r.size, nil
}

// fill reads the next chunk; the file must not change between chunks.
func (r *fileReader) fill() error {
	return r.m.do(r.ctx, r.id, func(ctx context.Context, ws module.Session) error {
		out, err := ws.ReadFile(ctx, r.path, r.offset, fileChunk)
		if err != nil {
			return fileError("path", err)
		}
		if len(out.Data) > fileChunk || out.Size < r.offset+int64(len(out.Data)) {
			return errors.New("workspace: the runtime answered an unusable file")
		}
		if !r.modified.IsZero() && (out.Size != r.size || !out.ModifiedAt.Equal(r.modified)) {
			return fmt.Errorf("workspace: %s changed while it was read", r.path)
		}
		r.size, r.modified, r.buf = out.Size, out.ModifiedAt, out.Data
		r.offset += int64(len(out.Data))
		return nil
	})
}

// Read is io.Reader's.
func (r *fileReader) Read(p []byte) (int, error) {
	if len(r.buf) == 0 {
		if r.offset >= r.size {
			return 0, io.EOF
		}
		if err := r.fill(); err != nil {
			return 0, err
		}
		if len(r.buf) == 0 {
			return 0, io.ErrUnexpectedEOF
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// DeleteFile removes a file of the session's workspace.
func (m *Manager) DeleteFile(ctx context.Context, id, path string) error {
	if err := workspace.ValidPath("path", path); err != nil {
		return err
	}
	return m.do(ctx, id, func(ctx context.Context, ws module.Session) error {
		if err := ws.DeleteFile(ctx, path); err != nil {
			return fileError("path", err)
		}
		return nil
	})
}

// ListFiles lists the files of the session's workspace (at most 1000).
func (m *Manager) ListFiles(ctx context.Context, id string) ([]File, error) {
	var files []File
	err := m.do(ctx, id, func(ctx context.Context, ws module.Session) error {
		listed, err := ws.ListFiles(ctx, maxListed)
		if err != nil {
			return fileError("id", err)
		}
		for _, it := range listed[:min(len(listed), maxListed)] {
			if workspace.ValidPath("", it.Path) != nil {
				continue // a name the routes could not reach
			}
			files = append(files, File{Path: it.Path, Size: it.Size, ModifiedAt: it.ModifiedAt})
		}
		return nil
	})
	return files, err
}
