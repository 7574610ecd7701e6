package modules

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cyrnel/cyrnel/envs/module"
	"github.com/cyrnel/cyrnel/host/control"
	"github.com/cyrnel/cyrnel/host/schema"
	"github.com/cyrnel/cyrnel/host/secrets"
	"github.com/cyrnel/cyrnel/host/store"
)

// faultyStore is the real store whose writes can be made to fail.
type faultyStore struct {
	*store.Store
	fail atomic.Bool
}

var errDiskFull = errors.New("disk full")

func (f *faultyStore) PutModule(ctx context.Context, m *store.Module) error {
	if f.fail.Load() {
		return errDiskFull
	}
	return f.Store.PutModule(ctx, m)
}

func (f *faultyStore) SetSetting(ctx context.Context, key, value string) error {
	if f.fail.Load() {
		return errDiskFull
	}
	return f.Store.SetSetting(ctx, key, value)
}

// gates records every gate a registry made, per module.
type gates struct {
	mu   sync.Mutex
	made map[string][]*gate
}

func (g *gates) factory(id string) Factory {
	return func() module.Environment {
		x := newGate(id)
		g.mu.Lock()
		defer g.mu.Unlock()
		g.made[id] = append(g.made[id], x)
		return x
	}
}

// controlled returns a registry of python and typescript gates on a store
// whose writes fail on demand, started on python.
func controlled(t *testing.T) (*Registry, *faultyStore, *gates) {
	t.Helper()
	dir := t.TempDir()
	real, err := store.Open(context.Background(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { real.Close() })
	st := &faultyStore{Store: real}
	r, g := onStore(t, st, dir, nil)
	return r, st, g
}

// onStore starts a registry on st (a second one on the same store is
// another host sharing the database).
func onStore(t *testing.T, st *faultyStore, dir string, n control.Notifier) (*Registry, *gates) {
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
	g := &gates{made: map[string][]*gate{}}
	r := New(log, st, box, control.New(log, n, nil), map[string]Factory{"python": g.factory("python"), "typescript": g.factory("typescript")}, Options{})
	t.Cleanup(func() { r.Stop(context.Background()) })
	if err := r.Activation(nil).Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return r, g
}

// running is the active instance's module and the gate behind it.
func running(t *testing.T, r *Registry) (string, *gate) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.active == nil {
		t.Fatal("no active environment")
	}
	return r.active.id, r.active.env.(*gate)
}

// stored is what a restarted host would activate, and with which config.
func storedState(t *testing.T, r *Registry) (string, map[string]any) {
	t.Helper()
	ctx := context.Background()
	id, err := r.storedActive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := r.Config(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return id, cfg
}

// Concurrent switches and config changes: whatever order they land in,
// what is stored afterwards is what runs.
func TestConcurrentChangesStoreWhatRuns(t *testing.T) {
	t.Parallel()
	r, _, _ := controlled(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			switch i % 3 {
			case 0:
				err = r.Activate(ctx, []string{"python", "typescript"}[i%2])
			case 1:
				_, err = r.SetConfig(ctx, "python", map[string]any{"n": float64(100 + i)})
			case 2:
				_, err = r.SetConfig(ctx, "typescript", map[string]any{"n": float64(100 + i)})
			}
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	id, g := running(t, r)
	sid, cfg := storedState(t, r)
	if sid != id {
		t.Fatalf("stored active %s, running %s", sid, id)
	}
	if fmt.Sprint(cfg) != fmt.Sprint(g.config) {
		t.Fatalf("stored config %v, running %v", cfg, g.config)
	}
}

// A config the new instance cannot set up with changes nothing: not what
// runs, not what is stored; the error names the config's field.
func TestFailedSetupChangesNothing(t *testing.T) {
	t.Parallel()
	r, _, g := controlled(t)
	ctx := context.Background()
	if _, err := r.SetConfig(ctx, "python", map[string]any{"n": 1.0}); err != nil {
		t.Fatal(err)
	}
	_, before := running(t, r)
	_, err := r.SetConfig(ctx, "python", map[string]any{"n": 13.0})
	var fe *schema.FieldError
	if !errors.As(err, &fe) || fe.Field != "config.n" {
		t.Fatalf("err %v, want a FieldError on config.n", err)
	}
	if _, now := running(t, r); now != before {
		t.Fatal("a failed setup replaced the running environment")
	}
	if _, cfg := storedState(t, r); cfg["n"] != 1.0 {
		t.Fatalf("stored config %v", cfg)
	}
	g.mu.Lock()
	failed := g.made["python"][len(g.made["python"])-1]
	g.mu.Unlock()
	<-failed.torndown // the candidate does not leak
	// An environment that is not active is checked the same way: its
	// config would break the switch to it.
	_, err = r.SetConfig(ctx, "typescript", map[string]any{"n": 13.0})
	if !errors.As(err, &fe) || fe.Field != "config.n" {
		t.Fatalf("inactive environment: err %v, want a FieldError on config.n", err)
	}
	if cfg, err := r.Config(ctx, "typescript"); err != nil || len(cfg) != 0 {
		t.Fatalf("inactive environment: stored %v %v", cfg, err)
	}
	if _, err := r.SetConfig(ctx, "typescript", map[string]any{"n": 2.0}); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	checked := g.made["typescript"][len(g.made["typescript"])-1]
	g.mu.Unlock()
	<-checked.torndown // set up to check the config, then not kept
	if id, _ := running(t, r); id != "python" {
		t.Fatalf("a config change of another environment activated %s", id)
	}
}

// When the change cannot be stored, the previous instance is put back and
// the candidate torn down; the store still says what runs.
func TestFailedPersistSwapsBack(t *testing.T) {
	t.Parallel()
	r, st, g := controlled(t)
	ctx := context.Background()
	_, before := running(t, r)
	st.fail.Store(true)
	if _, err := r.SetConfig(ctx, "python", map[string]any{"n": 2.0}); !errors.Is(err, errDiskFull) {
		t.Fatalf("set config: %v", err)
	}
	if err := r.Activate(ctx, "typescript"); !errors.Is(err, errDiskFull) {
		t.Fatalf("activate: %v", err)
	}
	st.fail.Store(false)
	if id, now := running(t, r); id != "python" || now != before {
		t.Fatalf("running %s %p, want the python instance from before", id, now)
	}
	select {
	case <-before.torndown:
		t.Fatal("the restored instance was torn down")
	default:
	}
	g.mu.Lock()
	cands := []*gate{g.made["python"][len(g.made["python"])-1], g.made["typescript"][len(g.made["typescript"])-1]}
	g.mu.Unlock()
	for _, c := range cands {
		<-c.torndown
	}
	if id, cfg := storedState(t, r); id != "python" || len(cfg) != 0 {
		t.Fatalf("stored %s %v", id, cfg)
	}
}

// Stop waits for the drain of an environment replaced while it ran an
// execution: when Stop returns, nothing is left draining.
func TestStopWaitsForDrains(t *testing.T) {
	t.Parallel()
	r, _, _ := controlled(t)
	ctx := context.Background()
	_, py := running(t, r)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Execute(ctx, module.ExecutionInput{EID: 1})
	}()
	<-py.started
	if err := r.Activate(ctx, "typescript"); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, draining, _ := r.Status(); len(draining) != 0 {
		t.Fatalf("still draining after Stop: %+v", draining)
	}
	<-done
	if err := r.Stop(ctx); err != nil {
		t.Fatalf("second stop: %v", err)
	}
	if err := r.Activate(ctx, "python"); !errors.Is(err, control.ErrStopped) {
		t.Fatalf("change after stop: %v", err)
	}
}

// events records what a plane announces.
type events struct {
	mu  sync.Mutex
	got []control.Event
}

func (e *events) Notify(_ context.Context, ev control.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.got = append(e.got, ev)
}

// The seam for several hosts: the events one registry announces, applied
// by another on the same store through Reload, leave the other running
// what is stored.
func TestReloadAppliesAnotherHostsChange(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	real, err := store.Open(context.Background(), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { real.Close() })
	st := &faultyStore{Store: real}
	announced := &events{}
	a, _ := onStore(t, st, dir, announced)
	b, _ := onStore(t, st, t.TempDir(), nil)
	ctx := context.Background()
	change := func(f func() error) {
		t.Helper()
		if err := f(); err != nil {
			t.Fatal(err)
		}
		announced.mu.Lock()
		got := announced.got
		announced.got = nil
		announced.mu.Unlock()
		if len(got) != 1 {
			t.Fatalf("announced %v", got)
		}
		if err := b.Reload(ctx, got[0]); err != nil {
			t.Fatal(err)
		}
		aid, ag := running(t, a)
		bid, bg := running(t, b)
		if aid != bid || fmt.Sprint(ag.config) != fmt.Sprint(bg.config) {
			t.Fatalf("after %v: a runs %s %v, b runs %s %v", got[0], aid, ag.config, bid, bg.config)
		}
	}
	change(func() error { _, err := a.SetConfig(ctx, "python", map[string]any{"n": 5.0}); return err })
	change(func() error { _, err := a.SetConfig(ctx, "typescript", map[string]any{"n": 6.0}); return err })
	change(func() error { return a.Activate(ctx, "typescript") })
}
