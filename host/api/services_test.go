package api

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/services"
)

// TestCreateServiceLocatesDomainFields: services names id, source, config
// (with paths inside it); each is located in the body, config's paths
// under body.config. On the old code the domain's own names came out
// unlocated.
func TestCreateServiceLocatesDomainFields(t *testing.T) {
	t.Parallel()
	body := map[string]any{"id": "pets", "adapter": "openapi", "source": map[string]any{"content": "{}"}, "config": map[string]any{"timeoutMs": 1}}
	for _, c := range []struct {
		err  *schema.FieldError
		want []string
	}{
		{&schema.FieldError{Field: "id", Message: "must be an identifier"}, []string{"body.id"}},
		{&schema.FieldError{Field: "source", Message: "not a description"}, []string{"body.source"}},
		{&schema.FieldError{Field: "config", Message: "does not match its schema", Problems: []schema.Problem{
			{Path: "/timeoutMs", Message: "too small"}, {Path: "/headers/0", Message: "not a string"},
		}}, []string{"body.config.timeoutMs", "body.config.headers[0]"}},
		{&schema.FieldError{Field: "secrets", Message: "does not match its schema", Problems: []schema.Problem{{Path: "", Message: "missing token"}}}, []string{"body.secrets"}},
	} {
		f := newFixture(t)
		f.svcs.err = c.err
		wantProblem(t, f.api.Post("/services", body), http.StatusUnprocessableEntity, c.want...)
	}
	f := newFixture(t)
	var s services.Service
	wantStatus(t, f.api.Post("/services", body), http.StatusCreated, &s)
	if in := f.svcs.created; in.ID != "pets" || in.Adapter != "openapi" || in.Source.Content != "{}" || in.Config["timeoutMs"] != 1.0 {
		t.Errorf("domain input %+v", in)
	}
	if s.ID != "pets" || !s.Enabled {
		t.Errorf("answer %+v", s)
	}
}

// TestServiceErrorStatuses: not found 404, exists and unavailable 409, a
// failing adapter 502; refresh names the stored source as the domain does
// (the request has no body to locate it in).
func TestServiceErrorStatuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err    error
		status int
	}{
		{fmt.Errorf("service x: %w", services.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("service x: %w", services.ErrExists), http.StatusConflict},
		{fmt.Errorf("service x: %w", services.ErrUnavailable), http.StatusConflict},
		{fmt.Errorf("x.y: %w: %w", services.ErrAdapter, errors.New("dial")), http.StatusBadGateway},
	} {
		for _, req := range []struct{ method, path string }{
			{http.MethodGet, "/services/x"}, {http.MethodDelete, "/services/x"}, {http.MethodPost, "/services/x/refresh"}, {http.MethodGet, "/services"},
		} {
			f := newFixture(t)
			f.svcs.err = c.err
			wantProblem(t, f.api.Do(req.method, req.path), c.status)
		}
	}
	f := newFixture(t)
	f.svcs.err = &schema.FieldError{Field: "source", Message: "unreachable"}
	wantProblem(t, f.api.Post("/services/x/refresh"), http.StatusUnprocessableEntity, "source")
	f.svcs.err = &schema.FieldError{Field: "enabled", Message: "the service's config does not validate"}
	wantProblem(t, f.api.Patch("/services/x", map[string]any{"enabled": true}), http.StatusUnprocessableEntity, "body.enabled")
}

// TestServiceReads: listings are one page with items [] when empty;
// refresh, patch and delete answer from the domain.
func TestServiceReads(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var list map[string]any
	wantStatus(t, f.api.Get("/services"), http.StatusOK, &list)
	if items, ok := list["items"].([]any); !ok || len(items) != 0 || list["nextCursor"] != nil || list["hasMore"] != false {
		t.Errorf("empty list %v", list)
	}
	f.svcs.svcs = []*services.Service{{ID: "pets", Enabled: true}}
	var s services.Service
	wantStatus(t, f.api.Patch("/services/pets", map[string]any{"enabled": false}), http.StatusOK, &s)
	if s.Enabled {
		t.Error("patch did not disable")
	}
	var r services.RefreshResult
	wantStatus(t, f.api.Post("/services/pets/refresh"), http.StatusOK, &r)
	if r.Service == nil || r.Service.ID != "pets" || len(r.Added) != 1 {
		t.Errorf("refresh %+v", r)
	}
	wantStatus(t, f.api.Delete("/services/pets"), http.StatusNoContent, nil)
	wantProblem(t, f.api.Get("/services/no-such"), http.StatusUnprocessableEntity, "path.id")
	wantProblem(t, f.api.Post("/services", map[string]any{"id": "x", "adapter": "openapi", "source": map[string]any{}, "extra": 1}), http.StatusUnprocessableEntity, "body.extra")
}
