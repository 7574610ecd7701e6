package sandbox

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// waitAppear waits, up to a bound, until find returns a process.
func waitAppear(t *testing.T, find func() []int) []int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if pids := find(); len(pids) > 0 {
			return pids
		}
		if time.Now().After(deadline) {
			t.Fatal("the awaited process did not appear")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a bound
	}
}

// TestSetsidGrandchildDies proves a grandchild that called setsid (and so
// left the program's session and process group) dies with the sandbox,
// whether the sandbox is killed or the program just exits; without a PID
// namespace the cgroup sweep gets it. The control shows the test sees an
// escape: with neither, the grandchild survives.
func TestSetsidGrandchildDies(t *testing.T) {
	t.Parallel()
	const code = `
import os, sys
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sleep", [sys.argv[1], "1000"])
    os._exit(0)
os.waitpid(pid, 0)
sys.stdin.read()
`
	cases := []struct {
		name    string
		relax   Relax
		kill    bool
		escapes bool
	}{
		{"kill", Relax{}, true, false},
		{"program exits", Relax{}, false, false},
		{"no namespaces: kill", Relax{Namespaces: true}, true, false},
		{"no namespaces: program exits", Relax{Namespaces: true}, false, false},
		{"control: no namespaces, no cgroups", Relax{Namespaces: true, Cgroups: true}, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			needLayers(t, c.relax)
			if c.relax.Namespaces && !c.relax.Cgroups && !Probe().Pids.OK() {
				cannotSandbox(t, "no pids cgroup to sweep")
			}
			marker := newMarker()
			stdinR, stdinW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer stdinW.Close()
			spec := pySpec(t, code, marker)
			spec.Stdin = stdinR
			spec.Relax = c.relax
			p := start(t, spec)
			_ = stdinR.Close()
			// The sleeper's argv[0] is the marker; the program's
			// command line only holds it as an argument.
			sleeper := waitAppear(t, func() []int { return hostProcsNamed(marker) })[0]
			sid, pgid := sessionOf(t, sleeper)
			initSid, initPgid := sessionOf(t, p.Pid())
			t.Logf("sleeper %d: session %d group %d; init %d: session %d group %d", sleeper, sid, pgid, p.Pid(), initSid, initPgid)
			if sid == initSid || pgid == initPgid {
				t.Fatalf("the sleeper did not leave the sandbox's session")
			}
			if c.kill {
				if err := p.Kill(); err != nil {
					t.Fatal(err)
				}
			} else {
				_ = stdinW.Close() // the program reads EOF and exits
			}
			exit := waitDone(t, p)
			// No polling: by the time the init is reaped the kernel has
			// killed and reaped the rest of its PID namespace (or the
			// sweep of the cgroup has killed it).
			left := hostProcsNamed(marker)
			if c.escapes {
				if len(left) == 0 {
					t.Fatal("control: the grandchild did not escape; the test cannot see an escape")
				}
				for _, pid := range left {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				return
			}
			if len(left) > 0 {
				for _, pid := range left {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
				t.Fatalf("setsid grandchild %v survived the sandbox (exit %+v)", left, exit)
			}
			if c.kill && (!exit.Killed || exit.Signal != syscall.SIGKILL) {
				t.Errorf("exit %+v, want Killed by SIGKILL", exit)
			}
			if !c.kill && (exit.Code != 0 || exit.Killed) {
				t.Errorf("exit %+v, want a clean exit", exit)
			}
		})
	}
}

// sessionOf reads a host process's session and process group ids.
func sessionOf(t *testing.T, pid int) (sid, pgid int) {
	t.Helper()
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	pgid, _ = strconv.Atoi(f[2])
	sid, _ = strconv.Atoi(f[3])
	return sid, pgid
}

// TestParentDeathKillsSandbox proves a sandbox dies with the process that
// started it: an intermediate process starts a sandboxed sleeper and is
// SIGKILLed; the sleeper must vanish.
func TestParentDeathKillsSandbox(t *testing.T) {
	t.Parallel()
	needLayers(t, Relax{})
	marker := newMarker()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = []string{roleEnv + "=pdeath", markerEnv + "=" + marker}
	stdin, err := cmd.StdinPipe() // held open: the intermediate waits on it
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lr := newLineReader(stdout)
	initPid, _ := strconv.Atoi(strings.TrimPrefix(lr.waitFor(t, "started "), "started "))
	waitAppear(t, func() []int { return hostProcsWith(marker) })
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait() // killed: the error says so
	waitGone(t, marker, 10*time.Second)
	// The init, orphaned, is reaped by whoever adopts it; until then its
	// zombie still holds its cgroups.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", initPid)); err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox init %d outlived its parent", initPid)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a bound
	}
	// The dead intermediate could not remove its sandbox's cgroups; the
	// next host's sweep does.
	sup := Probe()
	sweepCgroups(sup.Memory.Dir, sup.Pids.Dir)
	for _, dir := range []string{sup.Memory.Dir, sup.Pids.Dir} {
		if dir == "" {
			continue
		}
		left, _ := filepath.Glob(filepath.Join(dir, fmt.Sprintf("%s%d-*", cgroupPrefix, cmd.Process.Pid)))
		if len(left) > 0 {
			t.Errorf("cgroups of the dead host left after the sweep: %v", left)
		}
	}
}

// pdeathRole is the intermediate of TestParentDeathKillsSandbox.
func pdeathRole() int {
	marker := os.Getenv(markerEnv)
	p, err := Start(context.Background(), Spec{Argv: []string{"/bin/sh", "-c", "sleep 1000; : " + marker}})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("started", p.Pid())
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test kills us
	return 0
}

// TestSignalForwarded proves the init passes SIGTERM on to the program.
func TestSignalForwarded(t *testing.T) {
	t.Parallel()
	needLayers(t, Relax{})
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	spec := pySpec(t, `import time; print("ready", flush=True); time.sleep(1000)`)
	spec.Stdout = outW
	p := start(t, spec)
	_ = outW.Close()
	newLineReader(outR).waitFor(t, "ready")
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exit := waitDone(t, p)
	if exit.Signal != syscall.SIGTERM || exit.Killed || exit.Err != nil {
		t.Errorf("exit %+v, want the program ended by the forwarded SIGTERM", exit)
	}
}

// TestOrphansReaped proves the init reaps orphans: children whose parent
// exited never linger as zombies.
func TestOrphansReaped(t *testing.T) {
	t.Parallel()
	needLayers(t, Relax{})
	const code = `
import os, time
for i in range(20):
    pid = os.fork()
    if pid == 0:
        if os.fork() == 0:
            os._exit(0)  # an orphan once its parent is gone
        os._exit(0)
    os.waitpid(pid, 0)
def zombies():
    z = []
    for p in os.listdir("/proc"):
        try:
            with open("/proc/%s/stat" % p) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    z.append(p)
        except (OSError, IndexError):
            pass
    return z
deadline = time.monotonic() + 10
while zombies() and time.monotonic() < deadline:
    time.sleep(0.01)
print(len(zombies()))
`
	res := run(t, pySpec(t, code))
	if strings.TrimSpace(res.stdout) != "0" {
		t.Errorf("zombies left: %q (stderr %s)", res.stdout, res.stderr)
	}
}

// TestWorkDirRemoved proves what the program writes in its work directory
// is gone once it has ended: with namespaces a tmpfs that dies with the
// mount namespace, without them a host directory Start removes.
func TestWorkDirRemoved(t *testing.T) {
	t.Parallel()
	const code = `
import os, sys
with open("data.bin", "wb") as f:
    f.write(b"x" * (1 << 20))
print("written", os.getcwd(), flush=True)
sys.stdin.read()
`
	for _, relax := range []Relax{{}, {Namespaces: true}} {
		t.Run(fmt.Sprintf("namespaces=%v", !relax.Namespaces), func(t *testing.T) {
			needLayers(t, relax)
			stdinR, stdinW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			outR, outW, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			spec := pySpec(t, code)
			spec.Relax = relax
			spec.Stdin, spec.Stdout = stdinR, outW
			p := start(t, spec)
			closeAll(stdinR, outW)
			cwd := strings.TrimPrefix(newLineReader(outR).waitFor(t, "written "), "written ")
			// Seen from the host while the sandbox runs…
			hostPath := filepath.Join(cwd, "data.bin")
			if !relax.Namespaces {
				hostPath = fmt.Sprintf("/proc/%d/root%s/data.bin", p.Pid(), cwd)
			}
			if fi, err := os.Stat(hostPath); err != nil || fi.Size() != 1<<20 {
				t.Fatalf("file written in the work dir not found at %s: %v", hostPath, err)
			}
			_ = stdinW.Close()
			if exit := waitDone(t, p); exit.Code != 0 {
				t.Fatalf("exit %+v", exit)
			}
			// …and gone after (waitDone also checked the host work dir).
			if _, err := os.Stat(hostPath); err == nil {
				t.Errorf("%s survived the sandbox", hostPath)
			}
		})
	}
}
