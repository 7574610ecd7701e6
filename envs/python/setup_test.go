package python

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/cyrnel/cyrnel/envs/envtest"
	"github.com/cyrnel/cyrnel/envs/module"
)

// A preload module the interpreter cannot import fails Setup (its first
// worker cannot start), naming the module's place in the config; one it
// can import sets up.
func TestPreloadThatCannotBeImportedIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		preload []string
		field   string
	}{
		{[]string{"asyncio", "no_such_module_for_cyrnel"}, "preload[1]"},
		{[]string{"no_such_module_for_cyrnel", "asyncio"}, "preload[0]"},
		{[]string{"json"}, ""},
	} {
		e := New(slog.New(slog.NewTextHandler(io.Discard, nil)), testOptions)
		err := e.Setup(ctx, module.SetupContext{Bindings: envtest.NewRecorder(), Config: map[string]any{"preload": c.preload, "poolSize": 1}})
		if terr := e.Teardown(ctx); terr != nil {
			t.Error(terr)
		}
		if c.field == "" {
			if err != nil {
				t.Fatalf("preload %v: %v", c.preload, err)
			}
			continue
		}
		var ce *module.ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field || !strings.Contains(ce.Error(), "no_such_module_for_cyrnel") {
			t.Fatalf("preload %v: %v, want a ConfigError on %s naming the module", c.preload, err, c.field)
		}
	}
}
