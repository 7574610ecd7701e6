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
	"github.com/cyrnel/cyrnel/host/adapter"
	"github.com/cyrnel/cyrnel/host/adapters/openapi"
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
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	key, _ := secrets.LoadKey(log, "", dir)
	box, _ := secrets.New(key)
	m := New(log, st, box, map[string]adapter.Adapter{openapi.ID: openapi.New(openapi.Options{})})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestAFailedFirstCallDoesNotBreakTheTool(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id": 1}`))
	}))
	defer up.Close()
	doc, err := os.ReadFile("../../../shared/fixtures/openapi/petstore-3.0.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := newManager(t)
	ctx := context.Background()
	if _, err := m.Create(ctx, CreateInput{ID: "pets", Adapter: openapi.ID, Source: adapter.Source{Content: string(doc)},
		Config: map[string]any{"serverUrl": up.URL}}); err != nil {
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
}
