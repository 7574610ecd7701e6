package api

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/host/modules"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/services"
)

// TestSettingsLocateTheBodyAsTheConfig: PUT …/config and …/secrets send the
// config or secrets as the body itself, so the domain's config.preload[1]
// is body.preload[1] and a path inside secrets is under body; the same for
// modules and services. On the old code the domain located these itself.
func TestSettingsLocateTheBodyAsTheConfig(t *testing.T) {
	t.Parallel()
	for _, base := range []string{"/modules/python", "/services/pets"} {
		for _, c := range []struct {
			part string
			err  *schema.FieldError
			want []string
		}{
			{"config", &schema.FieldError{Field: "config.preload[1]", Message: "cannot import nope"}, []string{"body.preload[1]"}},
			{"config", &schema.FieldError{Field: "config", Message: "does not match", Problems: []schema.Problem{{Path: "/timeoutMs", Message: "too big"}, {Path: "", Message: "x is required"}}},
				[]string{"body.timeoutMs", "body"}},
			{"config", &schema.FieldError{Field: "config", Message: "the adapter refuses it"}, []string{"body"}},
			{"secrets", &schema.FieldError{Field: "secrets", Message: "does not match", Problems: []schema.Problem{{Path: "/auth/token", Message: "invalid value"}}},
				[]string{"body.auth.token"}},
		} {
			f := newFixture(t)
			f.mods.err, f.svcs.err = c.err, c.err
			wantProblem(t, f.api.Put(base+"/"+c.part, map[string]any{"preload": []string{"nope"}}), http.StatusUnprocessableEntity, c.want...)
		}
	}
}

// TestModuleConfigThatWeakensTheSandboxIs403 at each field it sets.
func TestModuleConfigThatWeakensTheSandboxIs403(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.mods.err = &modules.UnsandboxedError{Fields: []string{"sandbox.network", "sandbox.seccomp"}}
	p := wantProblem(t, f.api.Put("/modules/python/config", map[string]any{"sandbox": map[string]any{"network": true}}),
		http.StatusForbidden, "body.sandbox.network", "body.sandbox.seccomp")
	if !strings.Contains(p.Detail, "--allow-unsandboxed") {
		t.Errorf("detail %q", p.Detail)
	}
}

// TestSettingsRoundTrip: config is stored and returned, secrets answer only
// which are set; an unknown module or service is 404.
func TestSettingsRoundTrip(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var cfg map[string]any
	wantStatus(t, f.api.Put("/services/pets/config", map[string]any{"timeoutMs": 5}), http.StatusOK, &cfg)
	wantStatus(t, f.api.Get("/services/pets/config"), http.StatusOK, &cfg)
	if cfg["timeoutMs"] != 5.0 {
		t.Errorf("config %v", cfg)
	}
	var set struct{ Set []string }
	wantStatus(t, f.api.Put("/modules/python/secrets", map[string]any{"token": "s3cret", "key": "k"}), http.StatusOK, &set)
	if fmt.Sprint(set.Set) != "[/key /token]" {
		t.Errorf("set %v", set.Set)
	}
	var none map[string]any
	wantStatus(t, f.api.Get("/modules/python/secrets"), http.StatusOK, &none)
	if s, ok := none["set"].([]any); !ok || len(s) != 0 {
		t.Errorf("secrets of a module with none: %v, want set []", none)
	}
	f.svcs.err = fmt.Errorf("service x: %w", services.ErrNotFound)
	wantProblem(t, f.api.Get("/services/x/config"), http.StatusNotFound)
	f.mods.err = fmt.Errorf("x: %w", modules.ErrUnknownModule)
	wantProblem(t, f.api.Put("/modules/x/secrets", map[string]any{}), http.StatusNotFound)
}
