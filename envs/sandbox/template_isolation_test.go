package sandbox

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func TestTemplateForksIsolatedChildren(t *testing.T) {
	t.Parallel()
	tpl := startTemplate(t, Limits{})
	f := fork(t, tpl)
	out := f.output(t, `
import json, os, signal
print(json.dumps({
    "pid": os.getpid(), "uid": os.getuid(), "gid": os.getgid(),
    "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "host": os.uname().nodename,
    "proc_sys": os.path.exists("/proc/sys"), "kallsyms": os.path.exists("/proc/kallsyms"),
    "tmp": os.listdir("/tmp"), "cwd": os.getcwd(),
    "own_environ": b"HOME=/tmp" in open("/proc/self/environ", "rb").read(),
    "sigint": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
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
		SIGINT        bool `json:"sigint"`
		Cgroups       []string
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	// Its keeper, PID 1, is not dumpable: /proc (hidepid) hides it.
	if len(got.Procs) != 1 || got.Procs[0] != got.Pid {
		t.Errorf("pid %d, processes %v: want the program seeing only itself", got.Pid, got.Procs)
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
	// SIGINT raises KeyboardInterrupt in the program (its keeper ignores it).
	if !got.SIGINT {
		t.Error("the program's SIGINT handler is not Python's default_int_handler")
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
