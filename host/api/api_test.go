package api

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/danielgtaylor/huma/v2/humatest"

	"github.com/cyrnel/cyrnel/host/approval"
	"github.com/cyrnel/cyrnel/host/caller"
)

// TestBearerKey: every route but /health and the spec needs the key; a
// missing or wrong one is a 401 problem with a challenge.
func TestBearerKey(t *testing.T) {
	t.Parallel()
	f := &fakeProcesses{}
	_, a := New(Deps{Keys: &fakeKeys{keys: map[string]caller.Caller{"k3y": {KeyID: "k1", Roles: []caller.Role{caller.Runner}}}}, Processes: f, Environment: &fakeEnvironment{}})
	api := humatest.Wrap(t, a)
	for _, auth := range []string{"", "Authorization: Bearer wrong", "Authorization: k3y", "Authorization: Bearer k3y2"} {
		args := []any{}
		if auth != "" {
			args = append(args, auth)
		}
		rec := api.Get("/processes", args...)
		wantProblem(t, rec, http.StatusUnauthorized)
		if rec.Header().Get("WWW-Authenticate") != `Bearer realm="cyrnel"` {
			t.Errorf("%q: challenge %q", auth, rec.Header().Get("WWW-Authenticate"))
		}
	}
	wantStatus(t, api.Get("/processes", "Authorization: Bearer k3y"), http.StatusOK, nil)
	wantStatus(t, api.Get("/health"), http.StatusOK, nil)
	wantStatus(t, api.Get("/openapi.json"), http.StatusOK, nil)
}

// TestUnknownRoutesAndMethodsAreProblems, not chi's plain text.
func TestUnknownRoutesAndMethodsAreProblems(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	wantProblem(t, f.api.Get("/nothing-here"), http.StatusNotFound)
	wantProblem(t, f.api.Do(http.MethodPut, "/processes"), http.StatusMethodNotAllowed)
}

// TestBodiesMustBePlainJSON: 415 at header.Content-Type for anything but
// application/json (charset utf-8 at most, in any case); a request without
// a body needs none.
func TestBodiesMustBePlainJSON(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for _, ct := range []string{"", "text/plain", "application/json-patch+json", "application/json; charset=utf-16", "application/json; x=1", "application/json; charset"} {
		args := []any{bytes.NewReader([]byte(`{"code":"x"}`))}
		if ct != "" {
			args = append(args, "Content-Type: "+ct)
		}
		wantProblem(t, f.api.Post("/processes", args...), http.StatusUnsupportedMediaType, "header.Content-Type")
	}
	for _, ct := range []string{"application/json", "Application/JSON; charset=UTF-8"} {
		wantStatus(t, f.api.Post("/processes", bytes.NewReader([]byte(`{"code":"x"}`)), "Content-Type: "+ct), http.StatusCreated, nil)
	}
	wantStatus(t, f.api.Post("/processes/1/kill"), http.StatusOK, nil)
}

// TestNoBodyWhereNoneIsTaken: an operation the document gives no request
// body (deny, kill) refuses one, JSON included, with 415 at body, and
// decides nothing; the same operation without a body is the control.
func TestNoBodyWhereNoneIsTaken(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.approvals.items = []approval.Approval{{ID: "apr_1", State: "pending"}}
	wantProblem(t, f.api.Post("/approvals/apr_1/deny", bytes.NewReader([]byte(`{"reason":"no"}`)), "Content-Type: application/json"), http.StatusUnsupportedMediaType, "body")
	wantProblem(t, f.api.Post("/processes/1/kill", bytes.NewReader([]byte(`{}`)), "Content-Type: application/json"), http.StatusUnsupportedMediaType, "body")
	if f.approvals.items[0].State != "pending" {
		t.Fatalf("a refused deny decided the approval: %s", f.approvals.items[0].State)
	}
	wantStatus(t, f.api.Post("/approvals/apr_1/deny"), http.StatusOK, nil)
}

// TestMCPIsMountedWithItsOwnMediaTypes: /mcp is handed to the MCP handler,
// past the JSON-only rule (MCP checks its own).
func TestMCPIsMountedWithItsOwnMediaTypes(t *testing.T) {
	t.Parallel()
	var got string
	h, _ := New(Deps{MCP: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("Content-Type")
		w.WriteHeader(http.StatusAccepted)
	})})
	req := httptest.NewRequest(http.MethodPost, "/mcp", bytes.NewReader([]byte("{}")))
	req.Header.Set("Content-Type", "text/event-stream")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusAccepted || got != "text/event-stream" {
		t.Errorf("status %d, Content-Type seen %q", rec.Code, got)
	}
}

// TestLocations maps domain fields the three ways operations need.
func TestLocations(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		at        where
		field, to string
	}{
		{inBody, "", "body"}, {inBody, "code", "body.code"}, {inBody, "config.timeoutMs", "body.config.timeoutMs"},
		{isBody, "config", "body"}, {isBody, "config.preload[1]", "body.preload[1]"}, {isBody, "secrets[0]", "body[0]"},
		{notInRequest, "source", "source"}, {storedConfig, "config.x", "body.module"},
	} {
		if got := c.at(c.field); got != c.to {
			t.Errorf("%q → %q, want %q", c.field, got, c.to)
		}
	}
}

// TestMalformedJSONSaysWhere: a syntax error and a body that ends early are
// 400s whose message gives the line and column; well-formed JSON is the
// control.
func TestMalformedJSONSaysWhere(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for body, want := range map[string]string{
		"{\"code\": \"x\",\n \"waitMs\": x}": "line 2, column 12",
		"{\"code\": ":                        "line 1, column 10",
	} {
		rec := f.api.Post("/processes", bytes.NewReader([]byte(body)), "Content-Type: application/json")
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("%q: %d %s, want 400 naming %s", body, rec.Code, rec.Body, want)
		}
	}
	wantStatus(t, f.api.Post("/processes", bytes.NewReader([]byte(`{"code": "x"}`)), "Content-Type: application/json"), http.StatusCreated, nil)
}
