package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sourcegraph/jsonrpc2"

	"github.com/cyrnel/cyrnel/envs/module"
)

// The runtime's error codes for file requests (python/cyrnel/_files.py).
const (
	codeNotFound = 2
	codeInvalid  = 3
)

// WriteFile is module.SessionFiles': the runtime's writeFile request.
func (s *Session) WriteFile(ctx context.Context, path string, data []byte) error {
	var out struct{}
	return s.call(ctx, "writeFile", map[string]any{"path": path, "data": data}, &out)
}

// ReadFile is module.SessionFiles': the runtime's readFile request.
func (s *Session) ReadFile(ctx context.Context, path string, offset int64, limit int) (module.FileChunk, error) {
	var out struct {
		Data    []byte `json:"data"` // base64
		Size    int64  `json:"size"`
		MtimeNs int64  `json:"mtimeNs"`
	}
	if err := s.call(ctx, "readFile", map[string]any{"path": path, "offset": offset, "chunk": limit}, &out); err != nil {
		return module.FileChunk{}, err
	}
	return module.FileChunk{Data: out.Data, Size: out.Size, ModifiedAt: time.Unix(0, out.MtimeNs).UTC()}, nil
}

// DeleteFile is module.SessionFiles': the runtime's deleteFile request.
func (s *Session) DeleteFile(ctx context.Context, path string) error {
	var out struct{}
	return s.call(ctx, "deleteFile", map[string]any{"path": path}, &out)
}

// ListFiles is module.SessionFiles': the runtime's listFiles request.
func (s *Session) ListFiles(ctx context.Context, limit int) ([]module.FileInfo, error) {
	var out struct {
		Items []struct {
			Path       string  `json:"path"`
			Size       int64   `json:"size"`
			ModifiedAt float64 `json:"modifiedAt"` // seconds
		} `json:"items"`
	}
	if err := s.call(ctx, "listFiles", map[string]any{"limit": limit}, &out); err != nil {
		return nil, err
	}
	files := make([]module.FileInfo, len(out.Items))
	for i, it := range out.Items {
		sec := int64(it.ModifiedAt)
		files[i] = module.FileInfo{Path: it.Path, Size: it.Size, ModifiedAt: time.Unix(sec, int64((it.ModifiedAt-float64(sec))*1e9)).UTC()}
	}
	return files, nil
}

// call sends a file request to the session's runtime between executions
// and decodes the answer into out; the runtime's refusals become
// *module.FileError.
func (s *Session) call(ctx context.Context, method string, params, out any) error {
	var boxed json.RawMessage
	if err := s.conn.Call(ctx, method, params, &boxed); err != nil {
		var rpcErr *jsonrpc2.Error
		if errors.As(err, &rpcErr) && (rpcErr.Code == codeNotFound || rpcErr.Code == codeInvalid) {
			return &module.FileError{NotFound: rpcErr.Code == codeNotFound, Message: rpcErr.Message}
		}
		return err
	}
	raw, err := unbox(boxed)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s: the runtime's answer: %w", method, err)
	}
	return nil
}
