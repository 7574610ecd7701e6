package services

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/adapters"
	"github.com/cyrnel/cyrnel/host/adapters/openapi"
	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/secrets"
	"github.com/cyrnel/cyrnel/host/store"
)

func newManager(t testing.TB) *Manager {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return startManager(t, st, dir)
}

// startManager starts a manager on st, as a host does on its data
// directory dir (a second one on the same store is a restart).
func startManager(t testing.TB, st Store, dir string) *Manager {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	key, err := secrets.LoadKey(log, "", dir, false)
	if err != nil {
		t.Fatal(err)
	}
	box, err := secrets.New(key)
	if err != nil {
		t.Fatal(err)
	}
	m := New(log, st, box, control.New(log, nil, nil), map[string]adapters.Adapter{openapi.ID: openapi.New(openapi.Options{})}, Options{})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
	return m
}

func TestAFailedFirstCallDoesNotBreakTheTool(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id": 1}`))
	}))
	defer up.Close()
	doc, err := os.ReadFile("testdata/petstore-3.0.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t)
	ctx := context.Background()
	if _, err := m.Create(ctx, CreateInput{ID: "pets", Adapter: openapi.ID, Source: adapters.Source{Content: string(doc)},
		Config: map[string]any{"serverUrl": up.URL, "allowPrivateNetwork": true}}); err != nil {
		t.Fatal(err)
	}
	call := module.InvokeInput{ServiceID: "pets", ToolID: "showPetById", Parameters: map[string]any{"petId": "1"}}
	gone, cancel := context.WithCancel(ctx)
	cancel() // a program killed, a client gone
	if _, err := m.Invoke(gone, call); err == nil {
		t.Fatal("a call with a cancelled context succeeded")
	}
	res, err := m.Invoke(ctx, call)
	if err != nil {
		t.Fatalf("the next call: %v", err)
	}
	if res.(map[string]any)["status"] != 200 {
		t.Fatalf("result %v", res)
	}
	// Invalid parameters name each failing path.
	_, err = m.Invoke(ctx, module.InvokeInput{ServiceID: "pets", ToolID: "showPetById", Parameters: map[string]any{"petId": 1, "x": 2}})
	var fe *schema.FieldError
	if !errors.As(err, &fe) || len(fe.Problems) != 2 {
		t.Fatalf("validation: %v", err)
	}
	// Runtimes read the kind of failure and the failing fields.
	var te *module.ToolError
	if !errors.As(err, &te) || te.Code != module.ToolInvalidParameters || len(te.Details.([]schema.Problem)) != 2 {
		t.Fatalf("validation: %#v", te)
	}
	_, err = m.Invoke(ctx, module.InvokeInput{ServiceID: "pets", ToolID: "nope"})
	if !errors.As(err, &te) || te.Code != module.ToolNotFound || !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown tool: %v", err)
	}
}
