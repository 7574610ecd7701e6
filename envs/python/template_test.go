package python

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cyrnel/cyrnel/envs/envtest"
	"github.com/cyrnel/cyrnel/envs/module"
)

// leanTemplatesOf lists this process's children that run the Python
// template for programs that do not await: the one without asyncio in its
// preload.
func leanTemplatesOf(parent int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Contains(cmdline, []byte("cyrnel._template")) || bytes.Contains(cmdline, []byte("\x00asyncio\x00")) {
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
	tpls := leanTemplatesOf(os.Getpid())
	if len(tpls) != 1 {
		t.Fatalf("%d templates without asyncio among this process's children, want the one that ran pass", len(tpls))
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
	if now := leanTemplatesOf(os.Getpid()); len(now) != 1 || now[0] == tpls[0] {
		t.Errorf("templates after the restart: %v (the killed one was %d)", now, tpls[0])
	}
	// What cyrnel_template_restarts_total reports.
	if n := e.Workers().TemplateRestarts; n != 1 {
		t.Errorf("%d template restarts counted, want 1", n)
	}
}

// TestStatusSocketSendsCloseTheirSocket: the template and each keeper send
// a pidfd over a status socket through a socket object of their own, which
// they must close themselves. One left to the collector closes the same fd
// but formats a ResourceWarning on the way, and in a keeper that copies
// about 20 more pages after each program's fork (BenchmarkCPUSplit's
// keeper-minflt/exec).
func TestStatusSocketSendsCloseTheirSocket(t *testing.T) {
	t.Parallel()
	python, dir := runtimeOnDisk(t)
	script := `
import os, socket, sys, warnings
sys.path.insert(0, sys.argv[1])
from cyrnel import _template
unraised = []
sys.unraisablehook = unraised.append
warnings.simplefilter("error")
host, status = socket.socketpair()
r, w = os.pipe()
before = len(os.listdir("/proc/self/fd"))
_template.send_fd(status.fileno(), b"started", r)
after = len(os.listdir("/proc/self/fd"))
msg, fds, _, _ = socket.recv_fds(host, 64, 1)
same = os.path.samestat(os.fstat(fds[0]), os.fstat(r))
print(msg.decode(), same, after - before, [str(u.exc_value) for u in unraised])
for fd in fds + [r, w]:
    os.close(fd)
host.close()
status.close()
`
	out, err := exec.Command(python, "-I", "-S", "-c", script, dir).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got := strings.TrimSpace(string(out)); got != "started True 0 []" {
		t.Fatalf("got %q, want the message and the fd received, no fd left open and no socket left to the collector", got)
	}
}

// TestWarmBuildsTheCompilersTypes: the compiler builds its AST types on an
// interpreter's first program, so warm builds them once in the template
// instead of in each interpreter forked from it (where no preload imported
// ast). The first program's compile after warm allocates only what it
// frees again; in a fresh interpreter, the types (~1,400 blocks). Debian's
// interpreter, the one the sandbox and the benchmarks run: its standard
// library imports no ast on the way to cyrnel's runtime, byte-compiled as
// the environment's probe leaves it.
func TestWarmBuildsTheCompilersTypes(t *testing.T) {
	t.Parallel()
	const python = "/usr/bin/python3"
	_, dir := runtimeOnDisk(t)
	blocks := func(script string) int {
		t.Helper()
		out, err := exec.Command(python, "-I", "-S", "-c", script, dir).CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(out)))
		if err != nil {
			t.Fatalf("output %q: %v", out, err)
		}
		return n
	}
	const firstCompile = `
before = sys.getallocatedblocks()
compile("pass", "<program>", "exec", flags=0x400, dont_inherit=True)  # PyCF_ONLY_AST
print(sys.getallocatedblocks() - before)
`
	if cold := blocks("import sys\n" + firstCompile); cold < 500 {
		t.Fatalf("control: a fresh interpreter's first AST compile kept %d blocks: the check cannot tell a warm one", cold)
	}
	// Byte-compiled first, as the environment's probe does: compiling the
	// sources at import would build the types on its way.
	if failed := blocks("import compileall, sys\nprint(0 if compileall.compile_dir(sys.argv[1], quiet=1) else 1)"); failed != 0 {
		t.Fatal("the runtime did not byte-compile")
	}
	warm := "import sys\nsys.path.insert(0, sys.argv[1])\nfrom cyrnel import _worker\n_worker.warm([])\n" + firstCompile
	if n := blocks(warm); n > 50 {
		t.Errorf("after warm the first AST compile kept %d blocks: the compiler's types were built in the program, not in warm", n)
	}
}
