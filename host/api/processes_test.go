package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/process"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/store"
)

// TestCreateProcessPassesTheRequestOn: the body becomes the domain's input
// (autorun defaults to true, waitMs a duration) and the answer is 201.
func TestCreateProcessPassesTheRequestOn(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var p Process
	wantStatus(t, f.api.Post("/processes", map[string]any{"code": "print(1)", "ref": "r", "timeoutMs": 5000, "waitMs": 250}), http.StatusCreated, &p)
	in := f.procs.created
	if in.Code != "print(1)" || in.Ref != "r" || in.TimeoutMs != 5000 || !in.Autorun || in.Wait != 250*time.Millisecond {
		t.Errorf("domain input %+v", in)
	}
	if p.PID != 1 || p.Ref != "r" {
		t.Errorf("answer %+v", p)
	}
	wantStatus(t, f.api.Post("/processes", map[string]any{"code": "x", "autorun": false}), http.StatusCreated, nil)
	if f.procs.created.Autorun {
		t.Error("autorun false was not passed on")
	}
}

// TestProcessFieldErrorsAreLocatedInTheBody: the domain names its fields
// (code, timeoutMs); the API says where they sit in the request. On the old
// code the domain said body.code itself and the API passed it through, so a
// domain field came out unlocated ("code").
func TestProcessFieldErrorsAreLocatedInTheBody(t *testing.T) {
	t.Parallel()
	for field, want := range map[string]string{"code": "body.code", "timeoutMs": "body.timeoutMs", "ref": "body.ref"} {
		f := newFixture(t)
		f.procs.err = &schema.FieldError{Field: field, Message: "is wrong"}
		p := wantProblem(t, f.api.Post("/processes", map[string]any{"code": "x"}), http.StatusUnprocessableEntity, want)
		if p.Errors[0].Message != "is wrong" {
			t.Errorf("%s: message %q", field, p.Errors[0].Message)
		}
	}
}

// TestProcessErrorStatuses maps each domain error to its status; an
// unknown error is a 500 that shows nothing of it and logs it.
func TestProcessErrorStatuses(t *testing.T) {
	t.Parallel()
	secret := errors.New("disk at /var/secret-path failed")
	for _, c := range []struct {
		err    error
		status int
	}{
		{fmt.Errorf("process 9: %w", process.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("process 9 is running: %w", process.ErrConflict), http.StatusConflict},
		{fmt.Errorf("apply: %w", control.ErrStopped), http.StatusServiceUnavailable},
		{fmt.Errorf("write process: %w", process.ErrFull), http.StatusInsufficientStorage},
		{fmt.Errorf("insert: %w", &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}), http.StatusServiceUnavailable},
		{fmt.Errorf("read process: %w", store.ErrUnavailable), http.StatusServiceUnavailable},
		{secret, http.StatusInternalServerError},
	} {
		for _, req := range []struct{ method, path string }{
			{http.MethodGet, "/processes/9"}, {http.MethodGet, "/processes/9/wait"}, {http.MethodPost, "/processes/9/kill"},
			{http.MethodPost, "/processes/9/run"}, {http.MethodDelete, "/processes/9"}, {http.MethodGet, "/processes/9/stdout"},
			{http.MethodGet, "/processes"},
		} {
			f := newFixture(t)
			f.procs.err = c.err
			rec := f.api.Do(req.method, req.path)
			p := wantProblem(t, rec, c.status)
			// A database that cannot answer says when to try again.
			if retry := rec.Header().Get("Retry-After"); store.Unavailable(c.err) != (retry != "") {
				t.Errorf("%s %s (%v): Retry-After %q", req.method, req.path, c.err, retry)
			}
			if c.status == http.StatusInternalServerError {
				if strings.Contains(p.Detail, "secret") {
					t.Errorf("%s %s: a 500 shows its cause: %q", req.method, req.path, p.Detail)
				}
				if !strings.Contains(f.logs.String(), "secret-path") {
					t.Errorf("%s %s: the cause of a 500 was not logged", req.method, req.path)
				}
			}
		}
	}
}

// TestListProcessesPages: nextCursor leads to the next page, null on the
// last; a cursor not from this API is a 422 at query.cursor.
func TestListProcessesPages(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for range 5 {
		wantStatus(t, f.api.Post("/processes", map[string]any{"code": "x", "ref": "a"}), http.StatusCreated, nil)
	}
	type page struct {
		Items      []ProcessSummary `json:"items"`
		NextCursor *string          `json:"nextCursor"`
		HasMore    bool             `json:"hasMore"`
	}
	var pids []int64
	path := "/processes?limit=2&ref=a&state=idle"
	for pages := 0; ; pages++ {
		if pages > 3 {
			t.Fatalf("more pages than 5 processes in 2s make: %v", pids)
		}
		var pg page
		wantStatus(t, f.api.Get(path), http.StatusOK, &pg)
		if f.procs.listed.Limit != 2 || f.procs.listed.Ref != "a" || f.procs.listed.State != "idle" {
			t.Errorf("filter %+v", f.procs.listed)
		}
		for _, it := range pg.Items {
			pids = append(pids, it.PID)
		}
		if pg.HasMore != (pg.NextCursor != nil) {
			t.Fatalf("hasMore %v with nextCursor %v", pg.HasMore, pg.NextCursor)
		}
		if pg.NextCursor == nil {
			break
		}
		path = "/processes?limit=2&ref=a&state=idle&cursor=" + *pg.NextCursor
	}
	if fmt.Sprint(pids) != "[5 4 3 2 1]" {
		t.Errorf("pages gave %v, want 5 4 3 2 1", pids)
	}
	for _, bad := range []string{"nope", encodeCursor(0), "dDM" /* t3 */, "cDM=" /* padded */} {
		wantProblem(t, f.api.Get("/processes?cursor="+bad), http.StatusUnprocessableEntity, "query.cursor")
	}
	var empty map[string]any
	f = newFixture(t)
	wantStatus(t, f.api.Get("/processes"), http.StatusOK, &empty)
	if items, ok := empty["items"].([]any); !ok || len(items) != 0 || empty["nextCursor"] != nil {
		t.Errorf("empty list %v: items must be [] and nextCursor null", empty)
	}
	wantProblem(t, f.api.Get("/processes?limit=0"), http.StatusUnprocessableEntity, "query.limit")
	wantProblem(t, f.api.Get("/processes?colour=red"), http.StatusUnprocessableEntity, "query.colour")
}

// TestProcessTextPartsArePlainText: stdout, stderr and code are text/plain
// UTF-8; output is the object itself.
func TestProcessTextPartsArePlainText(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.procs.procs = []*process.Process{{
		ProcessSummary: process.ProcessSummary{PID: 1, State: process.Idle},
		Stdout:         "out ✓\n", Stderr: "err\n", Code: "print('out ✓')", Output: map[string]any{"n": 1.0},
	}}
	for part, want := range map[string]string{"stdout": "out ✓\n", "stderr": "err\n", "code": "print('out ✓')"} {
		rec := f.api.Get("/processes/1/" + part)
		wantStatus(t, rec, http.StatusOK, nil)
		if ct := rec.Header().Get("Content-Type"); ct != "text/plain; charset=utf-8" {
			t.Errorf("%s: Content-Type %q", part, ct)
		}
		if got := readAll(t, rec.Body); got != want {
			t.Errorf("%s: %q, want %q", part, got, want)
		}
	}
	var out map[string]any
	wantStatus(t, f.api.Get("/processes/1/output"), http.StatusOK, &out)
	if out["n"] != 1.0 || len(out) != 1 {
		t.Errorf("output %v", out)
	}
	var p map[string]any
	wantStatus(t, f.api.Get("/processes/1"), http.StatusOK, &p)
	if _, leaked := p["code"]; leaked || p["stdout"] != "out ✓\n" {
		t.Errorf("process %v: want stdout and no code", p)
	}
}

// TestProcessActions: wait passes its timeout, run its force flag, delete
// answers 204 without a body.
func TestProcessActions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.procs.procs = []*process.Process{{ProcessSummary: process.ProcessSummary{PID: 1, State: process.Idle}}}
	wantStatus(t, f.api.Get("/processes/1/wait?timeoutMs=1500"), http.StatusOK, nil)
	if f.procs.waited != 1500*time.Millisecond {
		t.Errorf("wait timeout %v", f.procs.waited)
	}
	wantStatus(t, f.api.Get("/processes/1/wait"), http.StatusOK, nil)
	if f.procs.waited != 30*time.Second {
		t.Errorf("default wait timeout %v, want 30s", f.procs.waited)
	}
	wantStatus(t, f.api.Post("/processes/1/run", map[string]any{"force": true}), http.StatusOK, nil)
	if !f.procs.forced {
		t.Error("force was not passed on")
	}
	wantStatus(t, f.api.Post("/processes/1/run"), http.StatusOK, nil)
	if f.procs.forced {
		t.Error("run without a body forced")
	}
	wantStatus(t, f.api.Post("/processes/1/kill"), http.StatusOK, nil)
	rec := f.api.Delete("/processes/1")
	wantStatus(t, rec, http.StatusNoContent, nil)
	if rec.Body.Len() != 0 {
		t.Errorf("204 with a body %q", rec.Body.String())
	}
	wantProblem(t, f.api.Get("/processes/0"), http.StatusUnprocessableEntity, "path.pid")
	wantProblem(t, f.api.Get("/processes/1/wait?timeoutMs=300001"), http.StatusUnprocessableEntity, "query.timeoutMs")
}
