package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// templateBoot starts the runtime's template from the repository's copy.
const templateBoot = "import sys; sys.path[:0] = sys.argv[1].split(':'); from cyrnel._template import main; sys.exit(main(sys.argv[2:]))"

func needTemplate(t testing.TB) {
	t.Helper()
	if why := TemplateUnavailable(Relax{}); why != "" {
		cannotSandbox(t, "no forking template here: "+why)
	}
}

// startTemplate starts a template of the real interpreter with the runtime
// from this repository and the given preload list.
func startTemplate(t testing.TB, limits Limits, preload ...string) *Template {
	return startTemplateWith(t, needPython(t), limits, nil, preload...)
}

func startTemplateWith(t testing.TB, py python, limits Limits, readPaths []string, preload ...string) *Template {
	t.Helper()
	return startTemplateSpec(t, testTemplateSpec(t, py, limits, readPaths, preload...))
}

// testTemplateSpec is a template of py with the runtime and preload.
func testTemplateSpec(t testing.TB, py python, limits Limits, readPaths []string, preload ...string) TemplateSpec {
	t.Helper()
	runtimeDir, err := filepath.Abs("../../python")
	if err != nil {
		t.Fatal(err)
	}
	return TemplateSpec{
		Argv: append([]string{py.exe, "-I", "-S", "-c", templateBoot, runtimeDir + ":/usr/lib/python3/dist-packages"}, preload...),
		// /etc/alternatives: Debian's numpy reaches libblas through it.
		ReadPaths: append([]string{py.prefix, runtimeDir, "/usr/lib/python3/dist-packages", "/etc/alternatives"}, readPaths...),
		Limits:    limits,
		Stderr:    os.Stderr,
	}
}

func startTemplateSpec(t testing.TB, spec TemplateSpec) *Template {
	t.Helper()
	needTemplate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tpl, err := StartTemplate(ctx, spec)
	if err != nil {
		t.Fatalf("start template: %v", err)
	}
	t.Cleanup(func() {
		tpl.Kill()
		<-tpl.Done()
	})
	return tpl
}

// forked is one child of a template, driven over the worker protocol.
type forked struct {
	p      *Process
	in     io.WriteCloser // requests to the worker (its fd 3)
	out    *bufio.Reader  // its answers (fd 4)
	stdout *lockedBuffer
	eof    chan struct{} // closed when stdout reached end-of-file
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// fork starts a child and waits for the runtime's ready notification.
func fork(t testing.TB, tpl *Template) *forked {
	t.Helper()
	return forkWith(t, tpl.Fork)
}

// forkWith is fork through Fork or ForkSession.
func forkWith(t testing.TB, forkFn func(context.Context, *os.File, *os.File, []*os.File) (*Process, error)) *forked {
	t.Helper()
	stdoutR, stdoutW, _ := os.Pipe()
	stderrR, stderrW, _ := os.Pipe()
	reqR, reqW, _ := os.Pipe()
	ansR, ansW, _ := os.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := forkFn(ctx, stdoutW, stderrW, []*os.File{reqR, ansW})
	closeAll(stdoutW, stderrW, reqR, ansW)
	if err != nil {
		closeAll(stdoutR, stderrR, reqW, ansR)
		t.Fatalf("fork: %v", err)
	}
	f := &forked{p: p, in: reqW, out: bufio.NewReader(ansR), stdout: &lockedBuffer{}, eof: make(chan struct{})}
	go func() {
		defer close(f.eof)
		b, _ := io.ReadAll(stdoutR)
		f.stdout.mu.Lock()
		f.stdout.b.Write(b)
		f.stdout.mu.Unlock()
	}()
	go func() { _, _ = io.Copy(os.Stderr, stderrR) }()
	t.Cleanup(func() {
		_ = p.Kill()
		p.Wait()
		closeAll(reqW, ansR, stdoutR, stderrR)
	})
	line, err := f.out.ReadString('\n')
	if err != nil || !strings.Contains(line, `"ready"`) {
		t.Fatalf("no ready notification: %q, %v (exit %+v)", line, err, p.Wait())
	}
	return f
}

// run sends code and returns the execute answer's result.
func (f *forked) run(t testing.TB, code string) map[string]any {
	t.Helper()
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "execute", "params": map[string]any{"code": code}})
	if _, err := f.in.Write(append(req, '\n')); err != nil {
		t.Fatalf("send: %v", err)
	}
	for {
		line, err := f.out.ReadString('\n')
		if err != nil {
			t.Fatalf("no answer: %v (exit %+v)", err, f.p.Wait())
		}
		var msg struct {
			ID     *int           `json:"id"`
			Result map[string]any `json:"result"`
		}
		if json.Unmarshal([]byte(line), &msg) == nil && msg.ID != nil {
			return msg.Result
		}
	}
}

// output runs code and returns what it printed.
func (f *forked) output(t testing.TB, code string) string {
	t.Helper()
	res := f.run(t, code)
	if res["status"] != "success" {
		t.Fatalf("code failed: %v", res)
	}
	<-f.eof // the runtime releases its output before it answers
	return f.stdout.String()
}

func TestTemplateForksIsolatedChildren(t *testing.T) {
	t.Parallel()
	tpl := startTemplate(t, Limits{})
	f := fork(t, tpl)
	out := f.output(t, `
import json, os
print(json.dumps({
    "pid": os.getpid(), "uid": os.getuid(), "gid": os.getgid(),
    "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "host": os.uname().nodename,
    "proc_sys": os.path.exists("/proc/sys"), "kallsyms": os.path.exists("/proc/kallsyms"),
    "tmp": os.listdir("/tmp"), "cwd": os.getcwd(),
    "own_environ": b"HOME=/tmp" in open("/proc/self/environ", "rb").read(),
    "cgroups": sorted({l.rstrip("\n").split(":", 2)[2] for l in open("/proc/self/cgroup")}),
    "visible": [p for p in ("/etc/passwd", "/home", "/var", "/root/.bash_history", "/work/wt-fork/envs") if os.path.exists(p)],
}))
`)
	var got struct {
		Pid, UID, GID int
		Procs         []int
		Host, Cwd     string
		ProcSys       bool `json:"proc_sys"`
		Kallsyms      bool
		Tmp           []string
		Visible       []string
		OwnEnviron    bool `json:"own_environ"`
		Cgroups       []string
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if got.Pid != 1 || len(got.Procs) != 1 || got.Procs[0] != 1 {
		t.Errorf("pid %d, processes %v: want PID 1 seeing only itself", got.Pid, got.Procs)
	}
	if got.UID != sandboxID || got.GID != sandboxID {
		t.Errorf("uid %d gid %d inside, want %d", got.UID, got.GID, sandboxID)
	}
	// The runtime works in its workspace, the only thing in its private /tmp
	// but for the read paths below /tmp (the runtime, when the repository is
	// checked out there), which are mirrored into it.
	want := []string{"workspace"}
	if runtimeDir, err := filepath.Abs("../../python"); err == nil && strings.HasPrefix(runtimeDir, "/tmp/") {
		want = append(want, strings.SplitN(strings.TrimPrefix(runtimeDir, "/tmp/"), "/", 2)[0])
	}
	slices.Sort(want)
	slices.Sort(got.Tmp)
	if got.Host != "sandbox" || got.Cwd != "/tmp/workspace" || !slices.Equal(got.Tmp, want) {
		t.Errorf("hostname %q, cwd %q, /tmp %v: want sandbox, /tmp/workspace, %v", got.Host, got.Cwd, got.Tmp, want)
	}
	if got.ProcSys || got.Kallsyms {
		t.Errorf("/proc shows system files (sys %v, kallsyms %v)", got.ProcSys, got.Kallsyms)
	}
	// Its cgroup namespace is rooted at its own cgroups: no host path.
	if len(got.Cgroups) != 1 || got.Cgroups[0] != "/" {
		t.Errorf("/proc/self/cgroup paths %v, want only /", got.Cgroups)
	}
	// Its own /proc files are its own (a non-dumpable process's are root's).
	if !got.OwnEnviron {
		t.Error("the program cannot read its own /proc/self/environ")
	}
	// (The network is cut off: the sibling test and the hostile suite.)
	if len(got.Visible) > 0 {
		t.Errorf("host paths visible: %v", got.Visible)
	}
	// The program runs as the child's own host uid, which owns its user
	// namespace, not as the host's root.
	checkHostIdentity(t, forkedHostPid(t, f.p), f.p.Layers().UID)
}

// A read path below /tmp stays readable in a child, whose own /tmp covers
// the template's (the Python environment extracts its runtime there).
func TestTemplateReadPathBelowTmp(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if !strings.HasPrefix(dir, "/tmp/") {
		t.Skipf("the temporary directory %s is not below /tmp", dir)
	}
	if err := os.WriteFile(filepath.Join(dir, "data.txt"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tpl := startTemplateWith(t, needPython(t), Limits{}, []string{dir})
	f := fork(t, tpl)
	out := f.output(t, fmt.Sprintf("print(open(%q).read())", filepath.Join(dir, "data.txt")))
	if strings.TrimSpace(out) != "kept" {
		t.Fatalf("read %q, want kept", out)
	}
}

// probeSiblingCode reports what a program can see and reach of another:
// the abstract Unix socket and the /tmp file the other made, and the
// processes it can see or signal.
const probeSiblingCode = `
import json, os, socket, sys
name, marker = %q, %q
res = {"file": os.path.exists("/tmp/" + marker)}
s = socket.socket(socket.AF_UNIX)
try:
    s.connect("\0" + name); res["connect"] = "connected"
except OSError as e:
    res["connect"] = type(e).__name__
res["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid())
signalled = []
for pid in res["pids"]:
    try:
        os.kill(pid, 0); signalled.append(pid)
    except OSError:
        pass
res["signalled"] = signalled
print(json.dumps(res))
`

type siblingView struct {
	File      bool   `json:"file"`
	Connect   string `json:"connect"`
	Pids      []int  `json:"pids"`
	Signalled []int  `json:"signalled"`
}

// Two children of one template, alive at once, share nothing: the second
// cannot see the first's /tmp file, reach its abstract socket, or see or
// signal any process but its own. The control runs the same probe as a
// plain host process against the same socket name, held by this test:
// it connects and sees and signals other processes, so the probe notices
// a leak.
func TestTemplateSiblingsIsolated(t *testing.T) {
	t.Parallel()
	tpl := startTemplate(t, Limits{})
	marker := newMarker()
	name := "cyrnel-sibling-" + marker
	a := fork(t, tpl)
	res := a.run(t, fmt.Sprintf(`
import builtins, socket
s = socket.socket(socket.AF_UNIX)
s.bind("\0" + %q)
s.listen()
open("/tmp/" + %q, "w").write("mine")
builtins.kept = s
`, name, marker))
	if res["status"] != "success" {
		t.Fatalf("first child: %v", res)
	}
	b := fork(t, tpl)
	var view siblingView
	if err := json.Unmarshal([]byte(b.output(t, fmt.Sprintf(probeSiblingCode, name, marker))), &view); err != nil {
		t.Fatal(err)
	}
	if view.File || view.Connect == "connected" || len(view.Pids) > 0 || len(view.Signalled) > 0 {
		t.Errorf("the second child saw or reached the first: %+v", view)
	}

	// Control: the host holds the same name; a plain process reaches it.
	ln, err := net.Listen("unix", "@"+name)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	out, err := exec.Command(needPython(t).exe, "-I", "-S", "-c", fmt.Sprintf(probeSiblingCode, name, marker)).Output()
	if err != nil {
		t.Fatal(err)
	}
	var control siblingView
	if err := json.Unmarshal(out, &control); err != nil {
		t.Fatal(err)
	}
	if control.Connect != "connected" || len(control.Pids) == 0 || len(control.Signalled) == 0 {
		t.Fatalf("control: a plain process neither reached the socket nor saw processes (%+v): the probe cannot notice a leak", control)
	}
}

// A setsid'd grandchild dies with its execution, whether the execution is
// killed or its program ends; the marker process is seen while it runs,
// so the check can notice one that survives.
func TestTemplateSetsidGrandchildDies(t *testing.T) {
	t.Parallel()
	tpl := startTemplate(t, Limits{})
	for _, kill := range []bool{true, false} {
		marker := newMarker()
		f := fork(t, tpl)
		res := f.run(t, fmt.Sprintf(`
import os
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", [%q, "1000"])
    os._exit(0)
os.waitpid(pid, 0)
`, marker))
		if res["status"] != "success" {
			t.Fatalf("program: %v", res)
		}
		waitAppear(t, func() []int { return hostProcsNamed(marker) })
		if kill {
			_ = f.p.Kill()
		} else {
			_ = f.in.Close() // the runtime ends after its one execution
		}
		exit := f.p.Wait()
		if left := hostProcsNamed(marker); len(left) > 0 {
			for _, pid := range left {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Fatalf("kill %v: setsid grandchild %v survived (exit %+v)", kill, left, exit)
		}
		if kill && !exit.Killed {
			t.Errorf("exit %+v, want Killed", exit)
		}
	}
}

// A fork bomb ends at the pids limit and a memory bomb at the memory limit,
// each reported; the next child of the same template starts with fresh
// counters.
func TestTemplateLimits(t *testing.T) {
	t.Parallel()
	tpl := startTemplate(t, Limits{Procs: 16, MemoryBytes: 96 << 20})
	bomb := fork(t, tpl)
	res := bomb.run(t, `
import os, time
n = 0
try:
    while True:
        if os.fork() == 0:
            time.sleep(1000)
        n += 1
except OSError as e:
    print("refused after", n)
`)
	if res["status"] != "success" {
		t.Fatalf("fork bomb: %v", res)
	}
	_ = bomb.p.Kill()
	if exit := bomb.p.Wait(); !exit.ProcLimit {
		t.Errorf("fork bomb: exit %+v, want ProcLimit", exit)
	}
	mem := fork(t, tpl)
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "execute", "params": map[string]any{"code": "b = [bytes(1 << 20) + b'x' for _ in range(1000)]"}})
	if _, err := mem.in.Write(append(req, '\n')); err != nil {
		t.Fatal(err)
	}
	if exit := mem.p.Wait(); !exit.MemoryLimit {
		t.Errorf("memory bomb: exit %+v, want MemoryLimit", exit)
	}
	fresh := fork(t, tpl)
	if out := fresh.output(t, "print('ok')"); strings.TrimSpace(out) != "ok" {
		t.Errorf("after the bombs: %q", out)
	}
	_ = fresh.p.Kill()
	if exit := fresh.p.Wait(); exit.MemoryLimit || exit.ProcLimit {
		t.Errorf("a fresh child inherited counters: %+v", exit)
	}
}

// Every child draws its own random numbers: random reseeds at fork, and
// numpy's global generator is reseeded by the template. numpy (with its
// BLAS) is preloaded, so this also shows a threaded library works in
// children of a single-threaded template.
func TestTemplateRandomDiffersAndNumpyWorks(t *testing.T) {
	t.Parallel()
	const system = "/usr/bin/python3"
	if err := exec.Command(system, "-c", "import numpy").Run(); err != nil {
		if why := os.Getenv("CYRNEL_TEST_NO_DATASCIENCE"); why != "" {
			t.Skipf("%s has no numpy (CYRNEL_TEST_NO_DATASCIENCE: %s)", system, why)
		}
		t.Fatalf("%s has no numpy (make test installs python3-numpy on Debian; set CYRNEL_TEST_NO_DATASCIENCE=<why> where it cannot): %v", system, err)
	}
	tpl := startTemplateWith(t, python{exe: system, prefix: "/usr"}, Limits{}, nil, "numpy")
	code := `
import random, numpy
a = numpy.ones((300, 300))
print(random.random(), numpy.random.rand(), (a @ a).sum())
`
	first := strings.Fields(fork(t, tpl).output(t, code))
	second := strings.Fields(fork(t, tpl).output(t, code))
	if len(first) != 3 || len(second) != 3 {
		t.Fatalf("output %q, %q", first, second)
	}
	if first[0] == second[0] || first[1] == second[1] {
		t.Errorf("two children drew the same numbers: %v, %v", first, second)
	}
	if first[2] != "27000000.0" {
		t.Errorf("matrix product sum %s, want 27000000.0", first[2])
	}
	// Control: children of a plain fork, nothing reseeded, draw the same
	// numpy numbers, so the comparison above would notice a template that
	// forgot to reseed.
	out, err := exec.Command(system, "-c", `
import os, numpy
r, w = os.pipe()
for _ in range(2):
    if os.fork() == 0:
        os.write(w, repr(numpy.random.rand()).encode() + b" ")
        os._exit(0)
    os.wait()
print(os.read(r, 100).decode())
`).Output()
	if err != nil {
		t.Fatal(err)
	}
	if draws := strings.Fields(string(out)); len(draws) != 2 || draws[0] != draws[1] {
		t.Fatalf("control: plainly forked children drew %v, not the same number twice", draws)
	}
}

// The helper binary is used only when built from the same source: the
// running test binary is the same build as itself, a foreign binary is not,
// and with no helper next to it the binary re-executes itself.
func TestHelperBinaryChoice(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if !sameBuild(self) {
		t.Error("the running binary is not the same build as itself")
	}
	if sameBuild("/bin/sh") {
		t.Error("/bin/sh passed for the same build")
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(self), HelperName)); err != nil && helperExe() != selfExe {
		t.Errorf("no helper next to the binary, yet it re-executes %s", helperExe())
	}
}

// A preload that leaves a thread running is refused with a message naming
// it: a forked child would inherit the thread's locks without the thread.
// The same template without that preload starts (the tests above).
func TestTemplateRefusesThreadedPreload(t *testing.T) {
	t.Parallel()
	needTemplate(t)
	py := needPython(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "starts_thread.py"), []byte(
		"import threading, time\nthreading.Thread(target=time.sleep, args=(1000,), name='leftover', daemon=True).start()\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	runtimeDir, err := filepath.Abs("../../python")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tpl, err := StartTemplate(ctx, TemplateSpec{
		Argv:      []string{py.exe, "-I", "-S", "-c", templateBoot, runtimeDir + ":" + dir, "starts_thread"},
		ReadPaths: []string{py.prefix, runtimeDir, dir},
	})
	if err == nil {
		tpl.Kill()
		t.Fatal("a template whose preload left a thread running started")
	}
	if !strings.Contains(err.Error(), "thread") || !strings.Contains(err.Error(), "leftover") {
		t.Errorf("error %q does not name the thread", err)
	}
}

// A template that dies takes its children with it (they live in its PID
// namespace), and says so through Done.
func TestTemplateDeathEndsChildren(t *testing.T) {
	t.Parallel()
	tpl := startTemplate(t, Limits{})
	f := fork(t, tpl)
	tpl.Kill()
	<-tpl.Done()
	exit := f.p.Wait()
	if exit.Code == 0 && exit.Signal == 0 {
		t.Errorf("the child of a killed template ended cleanly: %+v", exit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := tpl.Fork(ctx, os.Stdout, os.Stderr, nil); err == nil {
		t.Error("a dead template forked")
	}
}

// Fork gives up when its context ends, even if the template never answers
// (stopped here with SIGSTOP), and leaves nothing waiting behind.
func TestTemplateForkGivesUpOnAHungTemplate(t *testing.T) {
	t.Parallel()
	tpl := startTemplate(t, Limits{})
	if err := syscall.Kill(tpl.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(tpl.Pid(), syscall.SIGCONT)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	r, w, _ := os.Pipe()
	defer closeAll(r, w)
	returned := make(chan error, 1)
	go func() {
		_, err := tpl.Fork(ctx, w, w, nil)
		returned <- err
	}()
	select {
	case err := <-returned:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Fork from a stopped template: %v, want the deadline", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Fork from a stopped template never returned")
	}
}

// The template holds no_new_privs, a seccomp filter and only CAP_SETUID and
// CAP_SETGID, and runs single-threaded; a child holds no capability and
// stacks the full filter on the template's.
func TestTemplateIsConfined(t *testing.T) {
	t.Parallel()
	tpl := startTemplate(t, Limits{})
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tpl.Pid()))
	if err != nil {
		t.Fatal(err)
	}
	fields := map[string]string{}
	for line := range strings.Lines(string(status)) {
		if k, v, ok := strings.Cut(line, ":"); ok {
			fields[k] = strings.TrimSpace(v)
		}
	}
	want := map[string]string{
		"NoNewPrivs": "1", "Seccomp": "2", "Threads": "1",
		"CapEff": "00000000000000c0", "CapPrm": "00000000000000c0", "CapBnd": "00000000000000c0",
	}
	for k, v := range want {
		if fields[k] != v {
			t.Errorf("template %s: %q, want %q", k, fields[k], v)
		}
	}
	f := fork(t, tpl)
	out := f.output(t, `
import os
s = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
print(s["CapEff"].strip(), s["CapBnd"].strip())
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
print(libc.unshare(0x10000000), ctypes.get_errno())
`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("output %q", out)
	}
	caps := strings.Fields(lines[0])
	if caps[0] != "0000000000000000" || caps[1] != "0000000000000000" {
		t.Errorf("child capabilities effective %s bounding %s, want none", caps[0], caps[1])
	}
	if lines[1] != "-1 1" {
		t.Errorf("unshare(CLONE_NEWUSER) in a child: %q, want -1 EPERM", lines[1])
	}
}

// Drain stops forking but lets running children finish; the template ends
// after its last child.
func TestTemplateDrain(t *testing.T) {
	t.Parallel()
	tpl := startTemplate(t, Limits{})
	f := fork(t, tpl)
	tpl.Drain()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, w, _ := os.Pipe()
	defer closeAll(r, w)
	if _, err := tpl.Fork(ctx, w, w, nil); err == nil {
		t.Error("a drained template forked")
	}
	if res := f.run(t, "print('still here')"); res["status"] != "success" {
		t.Fatalf("a child of a drained template: %v", res)
	}
	select {
	case <-tpl.Done():
		t.Fatal("the template ended while its child ran")
	default:
	}
	_ = f.in.Close() // the runtime ends after its execution
	select {
	case <-tpl.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the drained template outlived its last child")
	}
}
