package tests

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// needRoot fails a test that can only run as root (the attacks are a root
// host's, and unshare needs CAP_SYS_ADMIN), unless CYRNEL_TEST_NO_ROOT says
// why this machine cannot.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if why := os.Getenv("CYRNEL_TEST_NO_ROOT"); why != "" {
		t.Skipf("not root (CYRNEL_TEST_NO_ROOT: %s)", why)
	}
	t.Fatal("this test runs as root; set CYRNEL_TEST_NO_ROOT=<why> to skip it")
}

func nonce(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// sandboxPath finds, as root on the host, the path through /proc/<pid>/root
// of a file a sandboxed program made in its /tmp: what the attack guessed by
// trying the pid range.
func sandboxPath(t *testing.T, name string) string {
	t.Helper()
	matches, err := filepath.Glob("/proc/[0-9]*/root/tmp/" + name)
	if err != nil || len(matches) == 0 {
		t.Fatalf("no process has /tmp/%s (%v)", name, err)
	}
	return matches[0]
}

// TestUndeclaredInterpreterNeverRuns is issue 22's first attack: a program
// in a session writes an executable script into its private /tmp, and a
// config names it through /proc/<pid>/root as the interpreter. The host
// used to run it as root to probe it. Now any interpreter the operator did
// not declare is 403 at the config's interpreter field, and the script
// (which would write a marker into a host directory) never runs; a symlink
// the program made to the declared interpreter is refused too (the host
// never resolves a caller's path). Control: the script, run on the host,
// does write the marker; the declared interpreter, by any of its names, is
// accepted.
func TestUndeclaredInterpreterNeverRuns(t *testing.T) {
	t.Parallel()
	needRoot(t)
	declared, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is required:", err)
	}
	real, err := filepath.EvalSymlinks(declared)
	if err != nil {
		t.Fatal(err)
	}
	markerDir := t.TempDir()
	marker := filepath.Join(markerDir, "ran")
	h := start(t, "", "CYRNEL_PYTHON=python3")
	s := h.newSession(map[string]any{})
	n := nonce(t)
	script, link := "x-"+n+".sh", "py-"+n
	code := fmt.Sprintf(`import os
with open("/tmp/%[1]s", "w") as f:
    f.write("#!/bin/sh\nid > %[2]s\n")
os.chmod("/tmp/%[1]s", 0o755)
os.symlink(%[4]q, "/tmp/%[3]s")
print("ok")`, script, marker, link, real)
	if p := h.run(code, session(s.ID)); p.exit() != "success" || p.Stdout != "ok\n" {
		t.Fatalf("write the script: %+v", p)
	}
	path := sandboxPath(t, script)
	for _, name := range []string{path, sandboxPath(t, link), "/bin/sh", "sh", "/proc/self/root" + real} {
		var prob problem
		st, _ := h.do("PUT", "/modules/python/config", map[string]any{"interpreter": name}, &prob)
		if st != http.StatusForbidden || len(prob.Errors) != 1 || prob.Errors[0].Location != "body.interpreter" {
			t.Errorf("interpreter %s: %d %+v, want 403 at body.interpreter", name, st, prob)
		}
	}
	if b, err := os.ReadFile(marker); err == nil {
		t.Fatalf("the host ran the program's script: %s", b)
	}
	// Controls: the script is live and would have left the marker...
	if out, err := exec.Command("/bin/sh", path).CombinedOutput(); err != nil {
		t.Fatalf("control: run the script on the host: %v: %s", err, out)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("control: the script left no marker: %v", err)
	}
	// ...and the declared interpreter is accepted by each of its names.
	for _, name := range []string{"python3", declared, real} {
		if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"interpreter": name}, nil); st != http.StatusOK {
			t.Errorf("declared interpreter %s: %d", name, st)
		}
	}
	if p := h.run("print('ran')", nil); p.Stdout != "ran\n" {
		t.Fatalf("after the declared interpreter: %+v", p)
	}
}

// noexecProgram writes a script and a copy of /bin/true into /tmp and
// /workspace, tries to run each and to map each executable; it prints one
// line per attempt. The controls: the files read back, /bin/true runs and
// maps executable.
const noexecProgram = `import mmap, os, shutil, subprocess
def run(path):
    try:
        subprocess.run([path], check=True, capture_output=True)
        return "ran"
    except OSError as e:
        return f"errno {e.errno}"
def map_exec(path):
    with open(path, "rb") as f:
        try:
            mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ | mmap.PROT_EXEC).close()
            return "mapped"
        except OSError as e:
            return f"errno {e.errno}"
out = []
for d in ("/tmp", "/workspace"):
    with open(d + "/x-NONCE.sh", "w") as f:
        f.write("#!/bin/sh\necho ran\n")
    os.chmod(d + "/x-NONCE.sh", 0o755)
    shutil.copy("/bin/true", d + "/true")
    os.chmod(d + "/true", 0o755)
    out += [f"{d}/x.sh {run(d + '/x-NONCE.sh')}", f"{d}/true {run(d + '/true')}", f"{d}/true {map_exec(d + '/true')}",
            f"{d} read {open(d + '/x-NONCE.sh').read().splitlines()[1]!r}"]
out += [f"/bin/true {run('/bin/true')}", f"/bin/true {map_exec('/bin/true')}"]
print("\n".join(out))`

// TestSandboxTmpIsNoexec: nothing a program writes can be executed or
// mapped executable, in a forked interpreter (a process) or a spawned one
// (a session): exec of a script or a binary it wrote to /tmp or /workspace
// fails with EACCES, an executable mapping of it with EPERM; nor can the
// host run it through /proc/<pid>/root (what issue 22's attack did). The
// controls: the program reads the files back, runs /bin/true and maps it
// executable; the host reads the script through /proc/<pid>/root.
func TestSandboxTmpIsNoexec(t *testing.T) {
	t.Parallel()
	needRoot(t)
	h := start(t, "")
	s := h.newSession(map[string]any{})
	want := "/tmp/x.sh errno 13\n/tmp/true errno 13\n/tmp/true errno 1\n/tmp read 'echo ran'\n" +
		"/workspace/x.sh errno 13\n/workspace/true errno 13\n/workspace/true errno 1\n/workspace read 'echo ran'\n" +
		"/bin/true ran\n/bin/true mapped\n"
	// Each its own name: the process's interpreter may linger a moment.
	names := map[string]string{"process": nonce(t), "session": nonce(t)}
	for what, extra := range map[string]map[string]any{"process": nil, "session": session(s.ID)} {
		if p := h.run(strings.ReplaceAll(noexecProgram, "NONCE", names[what]), extra); p.exit() != "success" || p.Stdout != want {
			t.Errorf("%s: %+v\nwant stdout %q", what, p, want)
		}
	}
	// The session lives on, and with it its /tmp.
	path := sandboxPath(t, "x-"+names["session"]+".sh")
	if b, err := os.ReadFile(path); err != nil || !strings.Contains(string(b), "echo ran") {
		t.Fatalf("control: the host reads %s: %v %q", path, err, b)
	}
	out, err := exec.Command(path).CombinedOutput()
	if !errors.Is(err, syscall.EACCES) {
		t.Fatalf("the host ran %s: %v %q, want EACCES", path, err, out)
	}
}

// machineFigures reads what the machine has as the server does: RAM in
// MiB, the kernel's process ceiling.
func machineFigures(t *testing.T) (ramMB, procs int64) {
	t.Helper()
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`MemTotal:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		t.Fatalf("no MemTotal in /proc/meminfo")
	}
	kb, _ := strconv.ParseInt(string(m[1]), 10, 64)
	procs = 1 << 62
	for _, f := range []string{"/proc/sys/kernel/pid_max", "/proc/sys/kernel/threads-max"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		procs = min(procs, n)
	}
	return kb >> 10, procs
}

// TestLimitsAboveTheMachineRefused: issue 22's key raised the limits past
// the machine (memory above its RAM, processes above what the kernel
// allows, a day of CPU). Each is 422 at its field, for either environment,
// and changes nothing; the control, limits within the machine, is accepted.
// On a machine whose figure is past the schema's maximum (a kernel that
// allows more than 65,536 processes, say), the schema refuses the value.
func TestLimitsAboveTheMachineRefused(t *testing.T) {
	t.Parallel()
	ramMB, procs := machineFigures(t)
	h := start(t, "")
	for field, v := range map[string]int64{"memoryMb": ramMB + 1, "tmpMb": ramMB + 1, "processes": procs + 1, "cpuSeconds": 86400} {
		for _, env := range []string{"python", "typescript"} {
			var prob problem
			st, _ := h.do("PUT", "/modules/"+env+"/config", map[string]any{"limits": map[string]any{field: v}}, &prob)
			if st != http.StatusUnprocessableEntity || len(prob.Errors) != 1 || prob.Errors[0].Location != "body.limits."+field {
				t.Errorf("%s limits.%s=%d: %d %+v, want 422 at body.limits.%s", env, field, v, st, prob, field)
			}
		}
	}
	var cfg map[string]any
	if h.do("GET", "/modules/python/config", nil, &cfg); cfg["limits"] != nil {
		t.Errorf("a refused config was stored: %v", cfg)
	}
	within := map[string]any{"memoryMb": min(ramMB, 1024), "processes": min(procs, 256), "cpuSeconds": 120}
	for _, env := range []string{"python", "typescript"} {
		if st, _ := h.do("PUT", "/modules/"+env+"/config", map[string]any{"limits": within}, nil); st != http.StatusOK {
			t.Errorf("control: %s limits within the machine: %d", env, st)
		}
	}
	if p := h.run("print('ran')", nil); p.Stdout != "ran\n" {
		t.Fatalf("after the limits: %+v", p)
	}
}

// withoutCgroups runs serve in a private mount namespace whose
// /sys/fs/cgroup is an empty tmpfs, as in a container with a fresh /sys.
func withoutCgroups(dataDir string, flags ...string) *exec.Cmd {
	args := append([]string{"-m", "--propagation", "private", "sh", "-c",
		`umount -l /sys/fs/cgroup && mount -t tmpfs tmpfs /sys/fs/cgroup && exec "$0" "$@"`,
		binary, "serve", "--addr", "127.0.0.1:0", "--data-dir", dataDir}, flags...)
	return exec.Command("unshare", args...)
}

// TestMissingCgroupsFailClosed is issue 22's fifth item: started where no
// cgroup hierarchy is visible, the server ran programs under rlimits alone.
// Now it refuses to start, naming the missing layers; with
// --allow-unsandboxed it starts, GET /environment says cgroups are off
// and memory and processes are held by rlimits, and programs run.
func TestMissingCgroupsFailClosed(t *testing.T) {
	t.Parallel()
	needRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatal("unshare (util-linux) is required:", err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := withoutCgroups(dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// It must exit by itself, before it would listen.
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		cmd.Process.Kill()
		<-done
		t.Fatalf("the server did not refuse to start without cgroups:\n%s", stderr.String())
	}
	if err == nil || !strings.Contains(stderr.String(), "memory cgroup") || !strings.Contains(stderr.String(), "pids cgroup") ||
		!strings.Contains(stderr.String(), "--allow-unsandboxed") || strings.Contains(stderr.String(), "cyrnel listening") {
		t.Fatalf("without cgroups: %v\n%s", err, stderr.String())
	}
	// With the operator's say-so it runs, and says what holds programs.
	h := startCommand(t, withoutCgroups(dir, "--allow-unsandboxed"), dir)
	var env struct {
		Active struct {
			Status struct {
				Sandbox struct {
					Layers struct {
						Memory string `json:"memory"`
						Procs  string `json:"procs"`
					} `json:"layers"`
				} `json:"sandbox"`
			} `json:"status"`
		} `json:"active"`
		Sandbox struct {
			AllowUnsandboxed bool     `json:"allowUnsandboxed"`
			Cgroups          *bool    `json:"cgroups"`
			Missing          []string `json:"missing"`
		} `json:"sandbox"`
	}
	h.do("GET", "/environment", nil, &env)
	if !env.Sandbox.AllowUnsandboxed || env.Sandbox.Cgroups == nil || *env.Sandbox.Cgroups || len(env.Sandbox.Missing) != 2 ||
		env.Active.Status.Sandbox.Layers.Memory != "rlimit" || env.Active.Status.Sandbox.Layers.Procs != "rlimit" {
		t.Fatalf("GET /environment without cgroups: %+v", env)
	}
	if p := h.run("print('ran')", nil); p.Stdout != "ran\n" {
		t.Fatalf("a program without cgroups: %+v", p)
	}
	// Control: on this machine as it is, the same server reports cgroups.
	h2 := start(t, "")
	h2.do("GET", "/environment", nil, &env)
	if env.Sandbox.Cgroups == nil || !*env.Sandbox.Cgroups || len(env.Sandbox.Missing) != 0 || !strings.HasPrefix(env.Active.Status.Sandbox.Layers.Memory, "cgroup") {
		t.Fatalf("control: GET /environment with cgroups: %+v", env)
	}
}
