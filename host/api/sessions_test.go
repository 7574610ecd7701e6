package api

import (
	"bytes"
	"fmt"
	"net/http"
	"testing"

	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/session"
)

// TestSessionFieldsAreLocated: creating a session names body fields; the
// file operations name the path (path.path, path.id) and the file itself
// (the body). On the old code the domain wrote these locations itself.
func TestSessionFieldsAreLocated(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		method, path string
		field, want  string
	}{
		{http.MethodPost, "/sessions", "module", "body.module"},
		{http.MethodPost, "/sessions", "idleTimeoutMs", "body.idleTimeoutMs"},
		{http.MethodGet, "/sessions/s1/files", "id", "path.id"},
		{http.MethodGet, "/sessions/s1/files/a.csv", "path", "path.path"},
		{http.MethodDelete, "/sessions/s1/files/a.csv", "path", "path.path"},
		{http.MethodPut, "/sessions/s1/files/a.csv", "", "body"},
	} {
		f := newFixture(t)
		f.sessions.err = &schema.FieldError{Field: c.field, Message: "refused"}
		args := []any{}
		switch c.method {
		case http.MethodPost:
			args = append(args, map[string]any{"module": "python"})
		case http.MethodPut:
			args = append(args, bytes.NewReader([]byte("a,b\n")), "Content-Type: application/octet-stream")
		}
		wantProblem(t, f.api.Do(c.method, c.path, args...), http.StatusUnprocessableEntity, c.want)
	}
}

// TestSessionErrorStatuses: missing 404, ended 409, too many or busy 429,
// stopping 503.
func TestSessionErrorStatuses(t *testing.T) {
	t.Parallel()
	for err, status := range map[error]int{
		fmt.Errorf("s1: %w", session.ErrNotFound):        http.StatusNotFound,
		fmt.Errorf("a.csv: %w", session.ErrFileNotFound): http.StatusNotFound,
		fmt.Errorf("s1: %w", session.ErrEnded):           http.StatusConflict,
		fmt.Errorf("s1: %w", session.ErrTooMany):         http.StatusTooManyRequests,
		fmt.Errorf("s1: %w", session.ErrBusy):            http.StatusTooManyRequests,
		fmt.Errorf("s1: %w", session.ErrStopping):        http.StatusServiceUnavailable,
	} {
		f := newFixture(t)
		f.sessions.err = err
		wantProblem(t, f.api.Get("/sessions/s1/files/a.csv"), status)
	}
	f := newFixture(t)
	wantStatus(t, f.api.Post("/sessions", map[string]any{"idleTimeoutMs": 5000}), http.StatusCreated, nil)
	if f.sessions.created.IdleTimeoutMs != 5000 {
		t.Errorf("create %+v", f.sessions.created)
	}
	wantStatus(t, f.api.Put("/sessions/s1/files/a.csv", bytes.NewReader([]byte("x,y\n")), "Content-Type: application/octet-stream"), http.StatusNoContent, nil)
	if string(f.sessions.put) != "x,y\n" {
		t.Errorf("put %q", f.sessions.put)
	}
}
