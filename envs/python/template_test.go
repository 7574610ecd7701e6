package python

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cyrnel/cyrnel/envs/envtest"
	"github.com/cyrnel/cyrnel/envs/module"
)

// templatesOf lists this process's children that run the Python template.
func templatesOf(parent int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Contains(cmdline, []byte("cyrnel._template")) {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if ppid, _ := strconv.Atoi(f[1]); ppid == parent {
			out = append(out, pid)
		}
	}
	return out
}

// A template that dies is replaced, and counted: executions go on. The template is
// found among this process's children before it is killed, so the test
// does kill the one that serves (and notices if there is none).
func TestTemplateRestartsAfterDeath(t *testing.T) {
	e := New(slog.New(slog.NewTextHandler(io.Discard, nil)), testOptions)
	if err := e.Setup(context.Background(), module.SetupContext{Bindings: envtest.NewRecorder()}); err != nil {
		t.Fatal(err)
	}
	defer e.Teardown(context.Background())
	if e.forking == nil {
		if why := os.Getenv("CYRNEL_TEST_NO_SANDBOX"); why != "" {
			t.Skipf("no template on this machine: %s (CYRNEL_TEST_NO_SANDBOX: %s)", e.tplWhy, why)
		}
		t.Fatalf("no template on this machine: %s; set CYRNEL_TEST_NO_SANDBOX=<why> on a machine that cannot sandbox", e.tplWhy)
	}
	run := func(eid int64) error {
		res, err := e.Execute(context.Background(), module.ExecutionInput{EID: eid, Code: "pass", Options: module.Options{TimeoutMs: 20000}})
		if err == nil && res.Exit != module.ExitSuccess {
			err = fmt.Errorf("%+v", res)
		}
		return err
	}
	if err := run(1); err != nil {
		t.Fatal(err)
	}
	tpls := templatesOf(os.Getpid())
	if len(tpls) != 1 {
		t.Fatalf("%d templates among this process's children, want 1", len(tpls))
	}
	pidfd, err := unix.PidfdOpen(tpls[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	if err := unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0); err != nil {
		t.Fatal(err)
	}
	// A pidfd polls POLLHUP once its process has been reaped.
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLHUP}}
	n, err := unix.Poll(fds, 10_000)
	for errors.Is(err, unix.EINTR) {
		n, err = unix.Poll(fds, 10_000)
	}
	if err != nil || n == 0 {
		t.Fatalf("the killed template was not reaped within 10 s (%v)", err)
	}
	// The warm children died with their template; an execution handed one
	// before its end was noticed fails (environment_error). At most the
	// pool's size do; then the new template serves.
	failed := 0
	for eid := int64(2); eid < 7+int64(failed); eid++ {
		if err := run(eid); err != nil {
			if failed++; failed > e.cfg.PoolSize {
				t.Fatalf("execution %d after the restart: %v", eid, err)
			}
		}
	}
	if now := templatesOf(os.Getpid()); len(now) != 1 || now[0] == tpls[0] {
		t.Errorf("templates after the restart: %v (the killed one was %d)", now, tpls[0])
	}
	// What cyrnel_template_restarts_total reports.
	if n := e.Workers().TemplateRestarts; n != 1 {
		t.Errorf("%d template restarts counted, want 1", n)
	}
}
