package server

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/cyrnel/cyrnel/envs/sandbox"
	"github.com/cyrnel/cyrnel/host/datadir"
	"github.com/cyrnel/cyrnel/host/pgtest"
	"github.com/cyrnel/cyrnel/host/process"
)

var errInjected = errors.New("injected start failure")

// newWithHook runs New on dir (and dbURL, "": SQLite) with hook before
// each start step.
func newWithHook(dir, dbURL string, hook func(string) error) (*Server, error) {
	cfg := Config{Addr: "127.0.0.1:0", DataDir: dir, DBURL: dbURL, Limits: process.DefaultLimits(), APIKey: "test-key", startHook: hook,
		AdaptProcs: true}
	if dbURL != "" {
		cfg.SecretsKey = base64.StdEncoding.EncodeToString(make([]byte, 32))
	}
	return New(context.Background(), slog.New(slog.NewTextHandler(io.Discard, nil)), cfg)
}

// TestFailedStartLeavesNothing fails New at each start step in turn and
// finds nothing of what the earlier steps started: no goroutine, no child
// process, no sandbox cgroup, no open file in the data directory, and the
// data directory's lock released. On PostgreSQL the steps include the
// cluster's. Not parallel: it counts the process's goroutines and children.
func TestFailedStartLeavesNothing(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { failEachStep(t, "") })
	t.Run("postgres", func(t *testing.T) { failEachStep(t, pgtest.Schema(t, pgtest.URL(t))) })
}

func failEachStep(t *testing.T, dbURL string) {
	var steps []string
	s, err := newWithHook(t.TempDir(), dbURL, func(step string) error { steps = append(steps, step); return nil })
	if err != nil {
		t.Fatal(err)
	}
	// The control: a host that started runs an environment's worker, which
	// the checks below must not find after a failure.
	running := children(t)
	s.Close()
	if len(steps) < 10 || !slices.Contains(steps, "environment") || !slices.Contains(steps, "store") {
		t.Fatalf("start steps %v: the stack no longer holds the host's parts", steps)
	}
	if !slices.Contains(steps, "maxprocs") {
		t.Fatalf("start steps %v: no GOMAXPROCS controller", steps)
	}
	if dbURL != "" && !slices.Contains(steps, "cluster handlers") {
		t.Fatalf("start steps %v: no cluster on PostgreSQL", steps)
	}
	t.Logf("start steps: %v; children while running: %d", steps, len(running))
	for _, failing := range steps {
		t.Run(strings.ReplaceAll(failing, " ", "_"), func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			dir := t.TempDir()
			_, err := newWithHook(dir, dbURL, func(step string) error {
				if step == failing {
					return errInjected
				}
				return nil
			})
			if !errors.Is(err, errInjected) {
				t.Fatalf("New = %v, want the injected failure at %q", err, failing)
			}
			if err := goleak.Find(before); err != nil {
				t.Errorf("goroutines left: %v", err)
			}
			if kids := children(t); len(kids) > 0 {
				t.Errorf("child processes left: %v", kids)
			}
			if cgs := sandboxCgroups(); len(cgs) > 0 {
				t.Errorf("cgroups left: %v", cgs)
			}
			if files := openFilesUnder(t, dir); len(files) > 0 {
				t.Errorf("files left open: %v", files)
			}
			d, err := datadir.Open(dir)
			if err != nil {
				t.Fatalf("data directory still locked: %v", err)
			}
			d.Close()
		})
	}
}

// children are this process's child processes' pids.
func children(t *testing.T) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil && !errors.Is(err, os.ErrNotExist) { // a thread may end meanwhile
			t.Fatal(err)
		}
		pids = append(pids, strings.Fields(string(b))...)
	}
	return pids
}

// sandboxCgroups are the cgroups this process's sandboxes made.
func sandboxCgroups() []string {
	sup := sandbox.Probe()
	var found []string
	for _, d := range []string{sup.Memory.Dir, sup.Pids.Dir, sup.CPU.Dir, sup.CPUAcct.Dir} {
		if d == "" {
			continue
		}
		m, _ := filepath.Glob(filepath.Join(d, "cyrnel-sbx-"+strconv.Itoa(os.Getpid())+"-*"))
		found = append(found, m...)
	}
	return found
}

// openFilesUnder are the files under dir this process holds open.
func openFilesUnder(t *testing.T, dir string) []string {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var open []string
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, dir) {
			open = append(open, target)
		}
	}
	return open
}
