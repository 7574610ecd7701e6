package modules

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/secrets"
	"github.com/cyrnel/cyrnel/host/store"
)

// gate is an environment whose executions block until released or killed;
// it records its lifecycle so the registry's handling of it can be checked.
type gate struct {
	id       string
	failSet  bool
	mu       sync.Mutex
	release  map[int64]chan module.Result
	started  chan int64
	torndown chan struct{}
	config   map[string]any
}

func newGate(id string) *gate {
	return &gate{id: id, release: map[int64]chan module.Result{}, started: make(chan int64, 16), torndown: make(chan struct{})}
}

func (g *gate) Info() module.Info {
	return module.Info{ID: g.id, Type: module.TypeEnvironment, ConfigSchema: []byte(`{"type":"object","properties":{"n":{"type":"integer"}},"additionalProperties":false}`)}
}
func (g *gate) Setup(_ context.Context, sc module.SetupContext) error {
	if g.failSet {
		return errors.New("no interpreter here")
	}
	if sc.Config["n"] == 13.0 {
		return &module.ConfigError{Field: "n", Err: errors.New("unlucky")}
	}
	g.config = sc.Config
	return nil
}
func (g *gate) ch(eid int64) chan module.Result {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.release[eid] == nil {
		g.release[eid] = make(chan module.Result, 1)
	}
	return g.release[eid]
}
func (g *gate) Execute(ctx context.Context, in module.ExecutionInput) (module.Result, error) {
	g.started <- in.EID
	select {
	case res := <-g.ch(in.EID):
		return res, nil
	case <-g.torndown: // a teardown kills what runs
		return module.Result{Exit: module.ExitCanceled}, nil
	}
}
func (g *gate) Kill(_ context.Context, eid int64) error {
	g.ch(eid) <- module.Result{Exit: module.ExitCanceled}
	return nil
}
func (g *gate) Docs(context.Context) (string, error)                           { return g.id, nil }
func (g *gate) ToolDocs(context.Context, module.ToolDocsInput) (string, error) { return "", nil }
func (g *gate) Teardown(context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-g.torndown:
	default:
		close(g.torndown)
	}
	return nil
}

func newRegistry(t *testing.T, envs map[string]func() *gate) *Registry {
	t.Helper()
	return newRegistryWith(t, envs, Options{})
}

func newRegistryWith(t *testing.T, envs map[string]func() *gate, opts Options) *Registry {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	key, _ := secrets.LoadKey(log, "", dir, false)
	box, _ := secrets.New(key)
	factories := map[string]Factory{}
	for id, f := range envs {
		factories[id] = func() module.Environment { return f() }
	}
	r := New(log, st, box, control.New(log, nil, nil), factories, opts)
	t.Cleanup(func() { r.Stop(context.Background()) })
	return r
}

func TestSwitchDrainsTheOldEnvironment(t *testing.T) {
	t.Parallel()
	var pys []*gate
	ts := newGate("typescript")
	r := newRegistry(t, map[string]func() *gate{
		"python":     func() *gate { g := newGate("python"); pys = append(pys, g); return g },
		"typescript": func() *gate { return ts },
	})
	ctx := context.Background()
	if err := r.Activation(nil).Start(ctx); err != nil {
		t.Fatal(err)
	}
	py := pys[len(pys)-1]
	done := make(chan string, 1)
	go func() {
		envID, res, err := r.Execute(ctx, module.ExecutionInput{EID: 1})
		if err != nil || res.Exit != module.ExitSuccess {
			t.Error(res, err)
		}
		done <- envID
	}()
	<-py.started
	if err := r.Activate(ctx, "typescript"); err != nil {
		t.Fatal(err)
	}
	active, draining, _ := r.Status()
	if active.Module != "typescript" || len(draining) != 1 || draining[0].Module != "python" || draining[0].InFlight != 1 {
		t.Fatalf("status: %+v %+v", active, draining)
	}
	// New executions go to the new environment; a kill still reaches the old.
	go r.Execute(ctx, module.ExecutionInput{EID: 2})
	if eid := <-ts.started; eid != 2 {
		t.Fatalf("new execution went to eid %d", eid)
	}
	select {
	case <-py.torndown:
		t.Fatal("torn down with an execution in flight")
	default:
	}
	py.ch(1) <- module.Result{Exit: module.ExitSuccess}
	if envID := <-done; envID != "python" {
		t.Fatalf("execution ran in %s", envID)
	}
	<-py.torndown // after its last execution
	if err := r.Kill(ctx, 2); err != nil {
		t.Fatal(err)
	}
	// The choice is stored: a new registry on the same store starts it.
	id, _, _ := r.store.Setting(ctx, ActiveSetting)
	if id != "typescript" {
		t.Fatalf("stored active %q", id)
	}
}

func TestActivateRefusals(t *testing.T) {
	t.Parallel()
	bad := newGate("typescript")
	bad.failSet = true
	r := newRegistryWith(t, map[string]func() *gate{
		"python":     func() *gate { return newGate("python") },
		"typescript": func() *gate { return bad },
	}, Options{Others: []module.Info{{ID: "openapi", Type: module.TypeAdapter}}})
	ctx := context.Background()
	if err := r.Activation(nil).Start(ctx); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]error{"nope": ErrUnknownModule, "openapi": ErrNotEnvironment, "typescript": ErrSetup} {
		if err := r.Activate(ctx, id); !errors.Is(err, want) {
			t.Fatalf("activate %s: %v, want %v", id, err, want)
		}
	}
	if _, err := r.SetEnabled(ctx, "python", false); !errors.Is(err, ErrActive) {
		t.Fatalf("disable active: %v", err)
	}
	bad.failSet = false
	if _, err := r.SetEnabled(ctx, "typescript", false); err != nil {
		t.Fatal(err)
	}
	if err := r.Activate(ctx, "typescript"); !errors.Is(err, ErrDisabled) {
		t.Fatalf("activate disabled: %v", err)
	}
	if active, _, _ := r.Status(); active.Module != "python" {
		t.Fatalf("a refused switch changed the active environment to %s", active.Module)
	}
}

func TestConfigIsValidatedAndApplied(t *testing.T) {
	t.Parallel()
	var made []*gate
	r := newRegistry(t, map[string]func() *gate{
		"python": func() *gate { g := newGate("python"); made = append(made, g); return g },
	})
	ctx := context.Background()
	if err := r.Activation(nil).Start(ctx); err != nil {
		t.Fatal(err)
	}
	n := len(made) // the registry also made one to read the module's info
	if _, err := r.SetConfig(ctx, "python", map[string]any{"n": "x"}); err == nil {
		t.Fatal("invalid config accepted")
	}
	if len(made) != n {
		t.Fatal("invalid config replaced the environment")
	}
	if _, err := r.SetConfig(ctx, "python", map[string]any{"n": 3.0}); err != nil {
		t.Fatal(err)
	}
	if len(made) != n+1 || made[n].config["n"] != 3.0 {
		t.Fatalf("config not applied: %d instances", len(made))
	}
	<-made[n-1].torndown
	set, err := r.SetSecrets(ctx, "python", map[string]any{"token": "t"})
	if err != nil || len(set) != 1 || set[0] != "/token" {
		t.Fatalf("secrets: %v %v", set, err)
	}
}
