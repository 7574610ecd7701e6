package services

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/adapters"
	"github.com/cyrnel/cyrnel/host/adapters/openapi"
	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/store"
)

// faultyStore is the real store whose service writes fail on demand.
type faultyStore struct {
	*store.Store
	fail atomic.Bool
}

var errDiskFull = errors.New("disk full")

func (f *faultyStore) InsertService(ctx context.Context, svc *store.Service, tools []store.Tool) error {
	if f.fail.Load() {
		return errDiskFull
	}
	return f.Store.InsertService(ctx, svc, tools)
}

func (f *faultyStore) UpdateService(ctx context.Context, svc *store.Service, columns ...string) error {
	if f.fail.Load() {
		return errDiskFull
	}
	return f.Store.UpdateService(ctx, svc, columns...)
}

func (f *faultyStore) DeleteService(ctx context.Context, id string) error {
	if f.fail.Load() {
		return errDiskFull
	}
	return f.Store.DeleteService(ctx, id)
}

// host is a manager on a store that can fail, restartable on the same data.
type host struct {
	dir string
	st  *faultyStore
	m   *Manager
}

func newHost(t *testing.T) *host {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	h := &host{dir: dir, st: &faultyStore{Store: st}}
	h.m = startManager(t, h.st, dir)
	return h
}

// restart is a new manager on the same store, as after a host restart.
func (h *host) restart(t *testing.T) *Manager {
	t.Helper()
	return startManager(t, h.st, h.dir)
}

// upstream answers every pet request with its own number, so a call says
// which upstream (which serverUrl) the service used.
func upstream(t *testing.T, n int) string {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id": %d, "name": "pet"}`, n)
	}))
	t.Cleanup(s.Close)
	return s.URL
}

func petstore(t *testing.T) string {
	t.Helper()
	doc, err := os.ReadFile("testdata/petstore-3.0.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(doc)
}

// reached calls a tool and returns the number of the upstream it reached.
func reached(t *testing.T, m *Manager, service string) (int, error) {
	t.Helper()
	res, err := m.Invoke(context.Background(), module.InvokeInput{ServiceID: service, ToolID: "showPetById", Parameters: map[string]any{"petId": "1"}})
	if err != nil {
		return 0, err
	}
	body, _ := res.(map[string]any)["body"].(map[string]any)
	var id int
	if _, err := fmt.Sscan(fmt.Sprint(body["id"]), &id); err != nil {
		t.Fatalf("result %v", res)
	}
	return id, nil
}

func wantField(t *testing.T, err error, field, path string) {
	t.Helper()
	var fe *schema.FieldError
	if !errors.As(err, &fe) || fe.Field != field {
		t.Fatalf("err %v, want a FieldError on %s", err, field)
	}
	if path == "" {
		return
	}
	for _, p := range fe.Problems {
		if p.Path == path {
			return
		}
	}
	t.Fatalf("err %v names no %s", err, path)
}

// A config beyond the schema's maximums is refused before anything is
// stored, at import and at a config change, and a restart shows nothing
// changed.
func TestConfigMaximumsStoreNothing(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	ctx := context.Background()
	up := upstream(t, 1)
	_, err := h.m.Create(ctx, CreateInput{ID: "huge", Adapter: openapi.ID, Source: adapters.Source{Content: petstore(t)},
		Config: map[string]any{"serverUrl": up, "allowPrivateNetwork": true, "timeoutMs": 1e300}})
	wantField(t, err, "config", "/timeoutMs")
	if _, err := h.m.Get(ctx, "huge"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused import exists: %v", err)
	}
	if _, err := h.m.Create(ctx, CreateInput{ID: "pets", Adapter: openapi.ID, Source: adapters.Source{Content: petstore(t)},
		Config: map[string]any{"serverUrl": up, "allowPrivateNetwork": true, "timeoutMs": 5000.0}}); err != nil {
		t.Fatal(err)
	}
	_, err = h.m.SetConfig(ctx, "pets", map[string]any{"serverUrl": up, "allowPrivateNetwork": true, "timeoutMs": 9223372036854775808.0})
	wantField(t, err, "config", "/timeoutMs")
	m := h.restart(t)
	if _, err := m.Get(ctx, "huge"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("after a restart a refused import exists: %v", err)
	}
	cfg, err := m.Config(ctx, "pets")
	if err != nil || cfg["timeoutMs"] != 5000.0 {
		t.Fatalf("stored config %v %v", cfg, err)
	}
	if n, err := reached(t, m, "pets"); err != nil || n != 1 {
		t.Fatalf("after a restart the tool reached %d: %v", n, err)
	}
}

// A change that cannot be stored leaves what runs as it was: tool calls
// still reach the upstream of the stored config; a failed import leaves no
// service; a failed delete leaves it callable.
func TestFailedPersistSwapsBack(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	ctx := context.Background()
	if _, err := h.m.Create(ctx, CreateInput{ID: "pets", Adapter: openapi.ID, Source: adapters.Source{Content: petstore(t)},
		Config: map[string]any{"serverUrl": upstream(t, 1), "allowPrivateNetwork": true}}); err != nil {
		t.Fatal(err)
	}
	h.st.fail.Store(true)
	if _, err := h.m.SetConfig(ctx, "pets", map[string]any{"serverUrl": upstream(t, 2), "allowPrivateNetwork": true}); !errors.Is(err, errDiskFull) {
		t.Fatalf("set config: %v", err)
	}
	if n, err := reached(t, h.m, "pets"); err != nil || n != 1 {
		t.Fatalf("after a failed change the tool reached %d: %v", n, err)
	}
	if _, err := h.m.SetEnabled(ctx, "pets", false); !errors.Is(err, errDiskFull) {
		t.Fatalf("disable: %v", err)
	}
	if err := h.m.Delete(ctx, "pets"); !errors.Is(err, errDiskFull) {
		t.Fatalf("delete: %v", err)
	}
	if n, err := reached(t, h.m, "pets"); err != nil || n != 1 {
		t.Fatalf("after a failed disable and delete the tool reached %d: %v", n, err)
	}
	if _, err := h.m.Create(ctx, CreateInput{ID: "more", Adapter: openapi.ID, Source: adapters.Source{Content: petstore(t)},
		Config: map[string]any{"serverUrl": upstream(t, 3), "allowPrivateNetwork": true}}); !errors.Is(err, errDiskFull) {
		t.Fatalf("create: %v", err)
	}
	if _, err := reached(t, h.m, "more"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a service whose import failed is callable: %v", err)
	}
}

// Concurrent config changes and enable/disable: afterwards the stored
// config and flag are what tool calls use.
func TestConcurrentChangesStoreWhatRuns(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	ctx := context.Background()
	if _, err := h.m.Create(ctx, CreateInput{ID: "pets", Adapter: openapi.ID, Source: adapters.Source{Content: petstore(t)},
		Config: map[string]any{"serverUrl": upstream(t, 0), "allowPrivateNetwork": true}}); err != nil {
		t.Fatal(err)
	}
	urls := map[string]int{}
	var wg sync.WaitGroup
	for i := range 12 {
		u := upstream(t, i+1)
		urls[u] = i + 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if i%3 == 2 {
				_, err = h.m.SetEnabled(ctx, "pets", i%2 == 0)
			} else {
				_, err = h.m.SetConfig(ctx, "pets", map[string]any{"serverUrl": u, "allowPrivateNetwork": true})
			}
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	svc, err := h.m.Get(ctx, "pets")
	if err != nil {
		t.Fatal(err)
	}
	n, err := reached(t, h.m, "pets")
	if !svc.Enabled {
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("stored disabled, call: %v", err)
		}
		return
	}
	if err != nil || n != urls[svc.Config["serverUrl"].(string)] {
		t.Fatalf("stored %v, the call reached %d: %v", svc.Config, n, err)
	}
}

// One list of reserved words: a service cannot be named after a global
// TypeScript programs cannot shadow either.
func TestReservedServiceNames(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	for _, id := range []string{"undefined", "class", "None"} {
		_, err := m.Create(context.Background(), CreateInput{ID: id, Adapter: openapi.ID, Source: adapters.Source{Content: petstore(t)}})
		wantField(t, err, "id", "")
	}
}

func TestStopTwice(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	ctx := context.Background()
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, "x"); !errors.Is(err, control.ErrStopped) {
		t.Fatalf("change after stop: %v", err)
	}
}
