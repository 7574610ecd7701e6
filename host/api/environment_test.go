package api

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/modules"
	"github.com/cyrnel/cyrnel/host/schema"
)

// TestHealthNamesTheActiveEnvironment, null without one.
func TestHealthNamesTheActiveEnvironment(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var h map[string]any
	wantStatus(t, f.api.Get("/health"), http.StatusOK, &h)
	if h["status"] != "ok" || h["version"] != "test" || h["environment"] != nil {
		t.Errorf("health %v", h)
	}
	if _, ok := h["environment"]; !ok {
		t.Error("environment is absent, want null")
	}
	f.env.active = &modules.EnvStatus{Module: "python"}
	wantStatus(t, f.api.Get("/health"), http.StatusOK, &h)
	if h["environment"] != "python" {
		t.Errorf("health %v", h)
	}
}

// TestReadiness: 200 while the host is ready, 503 saying why when not, and
// no key needed for either.
func TestReadiness(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var r map[string]any
	wantStatus(t, f.api.Get("/health/ready"), http.StatusOK, &r)
	if r["status"] != "ready" {
		t.Errorf("ready %v", r)
	}
	f.ready.err = fmt.Errorf("database: %w", errors.New("the database is corrupt"))
	p := wantProblem(t, f.api.Get("/health/ready"), http.StatusServiceUnavailable)
	if !strings.Contains(p.Detail, "database: the database is corrupt") {
		t.Errorf("detail %q", p.Detail)
	}
}

// TestEnvironmentStatus: the active one with its status, draining ones as a
// list ([] when none), the set-up error when none is active.
func TestEnvironmentStatus(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.env.setupErr = "python: no interpreter"
	var e map[string]any
	wantStatus(t, f.api.Get("/environment"), http.StatusOK, &e)
	if _, ok := e["active"]; ok || e["error"] != "python: no interpreter" || fmt.Sprint(e["draining"]) != "[]" {
		t.Errorf("environment %v", e)
	}
	f.env.setupErr = ""
	f.env.active = &modules.EnvStatus{Module: "python", InFlight: 2, Status: map[string]any{"idle": 1}}
	f.env.draining = []modules.EnvStatus{{Module: "typescript", InFlight: 1}}
	wantStatus(t, f.api.Get("/environment"), http.StatusOK, &e)
	if fmt.Sprint(e["active"]) != "map[inFlight:2 module:python status:map[idle:1]]" || fmt.Sprint(e["draining"]) != "[map[inFlight:1 module:typescript]]" {
		t.Errorf("environment %v", e)
	}
}

// TestSetEnvironmentLocatesAtTheModule: every refusal of the module the
// body names is located at body.module, whether the module is unknown,
// disabled or not an environment, or its stored config is bad (the domain
// names the config's field; the request holds no config, so the old
// pass-through location body.preload[1] named nothing in it) or weakens the
// sandbox (403).
func TestSetEnvironmentLocatesAtTheModule(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err    error
		status int
	}{
		{fmt.Errorf("nope: %w", modules.ErrUnknownModule), http.StatusUnprocessableEntity},
		{fmt.Errorf("ts: %w", modules.ErrDisabled), http.StatusUnprocessableEntity},
		{fmt.Errorf("openapi: %w", modules.ErrNotEnvironment), http.StatusUnprocessableEntity},
		{&schema.FieldError{Field: "config.preload[1]", Message: "cannot import nope in the sandbox"}, http.StatusUnprocessableEntity},
		{&modules.UnsandboxedError{Fields: []string{"sandbox.network"}, Stored: "python"}, http.StatusForbidden},
	} {
		f := newFixture(t)
		f.env.err = c.err
		wantProblem(t, f.api.Put("/environment", map[string]any{"module": "python"}), c.status, "body.module")
	}
	f := newFixture(t)
	f.env.err = fmt.Errorf("%w: python: boom", modules.ErrSetup)
	wantProblem(t, f.api.Put("/environment", map[string]any{"module": "python"}), http.StatusUnprocessableEntity, "body")
	f.env.err = nil
	var e map[string]any
	wantStatus(t, f.api.Put("/environment", map[string]any{"module": "typescript"}), http.StatusOK, &e)
	if f.env.activated != "typescript" || fmt.Sprint(e["active"]) != "map[inFlight:0 module:typescript]" {
		t.Errorf("activated %q, answer %v", f.env.activated, e)
	}
}

// TestEnvironmentDocsAreMarkdown, and 503 without an active environment.
func TestEnvironmentDocsAreMarkdown(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	p := wantProblem(t, f.api.Get("/environment/docs"), http.StatusServiceUnavailable)
	if !strings.Contains(p.Detail, "no active environment") {
		t.Errorf("detail %q", p.Detail)
	}
	f.env.env = &fakeEnv{}
	rec := f.api.Get("/environment/docs")
	wantStatus(t, rec, http.StatusOK, nil)
	if ct := rec.Header().Get("Content-Type"); ct != "text/markdown; charset=utf-8" || readAll(t, rec.Body) != "# Writing programs" {
		t.Errorf("docs %q as %q", rec.Body.String(), ct)
	}
}

// TestModules: listed and got as views with their schemas; an unknown one
// is 404; disabling the active environment 409.
func TestModules(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.mods.views = []modules.ModuleView{
		{Info: module.Info{ID: "python", Type: module.TypeEnvironment, ConfigSchema: []byte(`{"type":"object"}`)}, Enabled: true, Active: true},
		{Info: module.Info{ID: "openapi", Type: module.TypeAdapter}, Enabled: true},
	}
	var list struct {
		Items []moduleView `json:"items"`
	}
	wantStatus(t, f.api.Get("/modules"), http.StatusOK, &list)
	if len(list.Items) != 2 || list.Items[0].ID != "python" || string(list.Items[0].ConfigSchema) != `{"type":"object"}` || !list.Items[0].Active {
		t.Errorf("modules %+v", list.Items)
	}
	var m moduleView
	wantStatus(t, f.api.Get("/modules/openapi"), http.StatusOK, &m)
	if m.Type != "adapter" {
		t.Errorf("module %+v", m)
	}
	wantProblem(t, f.api.Get("/modules/nope"), http.StatusNotFound)
	wantStatus(t, f.api.Patch("/modules/openapi", map[string]any{"enabled": false}), http.StatusOK, &m)
	if m.Enabled {
		t.Error("patch did not disable")
	}
	f.mods.err = fmt.Errorf("python: %w", modules.ErrActive)
	wantProblem(t, f.api.Patch("/modules/python", map[string]any{"enabled": false}), http.StatusConflict)
}
