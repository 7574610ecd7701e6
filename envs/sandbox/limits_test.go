package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/envtest"
)

// TestForkBombContained proves an exponential fork bomb stays within the
// process limit, the host keeps working, and Kill leaves none of it.
// With cgroups relaxed RLIMIT_NPROC holds it, a root host's included: its
// programs are nobody, whom the limit binds (before, they were uid 0 and
// had no process limit at all).
func TestForkBombContained(t *testing.T) {
	t.Parallel()
	for _, relax := range []Relax{{}, {Cgroups: true}} {
		t.Run(fmt.Sprintf("cgroups=%v", !relax.Cgroups), func(t *testing.T) {
			forkBomb(t, relax)
		})
	}
}

func forkBomb(t *testing.T, relax Relax) {
	needLayers(t, relax)
	if Probe().Layers(relax).Procs == KindNone {
		cannotSandbox(t, "no process limit on this machine")
	}
	marker := newMarker()
	code := `
import os
mark = "` + marker + `"
told = False
while True:
    try:
        os.fork()
    except OSError:
        if not told:
            os.write(1, b"refused\n")
            told = True
`
	const limit = 32
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	spec := pySpec(t, code)
	spec.Limits.Procs = limit
	spec.Relax = relax
	spec.Stdout = outW
	p := start(t, spec)
	_ = outW.Close()
	newLineReader(outR).waitFor(t, "refused")
	n := len(hostProcsWith(marker))
	t.Logf("bomb holds %d processes under a limit of %d (%s)", n, limit, p.Layers().Procs)
	if n > limit {
		t.Errorf("%d bomb processes, limit %d", n, limit)
	}
	// The host can still start processes.
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Errorf("host cannot start a process during the bomb: %v", err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	exit := waitDone(t, p)
	if left := hostProcsWith(marker); len(left) > 0 {
		t.Errorf("%d bomb processes survived Kill", len(left))
	}
	if p.Layers().Procs.Cgroup() && !exit.ProcLimit {
		t.Errorf("exit %+v does not say the process limit was hit", exit)
	}
}

// TestUnprivilegedParent proves the sandbox works when its parent is not
// root: an intermediate running as nobody starts a sandbox whose program
// forks until RLIMIT_NPROC (the only process limit an unprivileged host has)
// stops it.
func TestUnprivilegedParent(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("this process is unprivileged already; every other test covers it")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A copy nobody can read and execute.
	dir, err := os.MkdirTemp("", "cyrnel-sandbox-unprivileged-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyExe := filepath.Join(dir, "sandbox.test")
	if err := copyFile(exe, copyExe); err != nil {
		t.Fatal(err)
	}
	n, _ := rand.Int(rand.Reader, big.NewInt(1e6))
	marker := fmt.Sprintf("1000.%06d", n) // a sleep duration nobody else uses
	cmd := exec.Command(copyExe)
	cmd.Dir = dir
	cmd.Env = []string{roleEnv + "=unprivileged", markerEnv + "=" + marker}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lr := newLineReader(stdout)
	var sup Support
	if err := json.Unmarshal([]byte(strings.TrimPrefix(lr.waitFor(t, "probe "), "probe ")), &sup); err != nil {
		t.Fatal(err)
	}
	t.Logf("probe as nobody: %+v", sup)
	if err := sup.Check(Relax{}); err != nil {
		cannotSandbox(t, fmt.Sprintf("kernel forbids a layer to an unprivileged process: %v", err))
	}
	if l := sup.Layers(Relax{}); l.Procs != KindRlimit {
		t.Errorf("process limit as nobody: %q, want rlimit", l.Procs)
	}
	defer func() {
		if t.Failed() {
			t.Logf("intermediate stderr:\n%s", stderr.String())
		}
	}()
	uidMap := strings.Fields(strings.TrimPrefix(lr.waitFor(t, "uid_map "), "uid_map "))
	if len(uidMap) != 3 || uidMap[0] != "1000" || uidMap[1] != "65534" || uidMap[2] != "1" {
		t.Errorf("uid_map %v, want nobody (65534) mapped to 1000", uidMap)
	}
	refused := false
	for line := lr.next(t); line != "spawned"; line = lr.next(t) {
		refused = refused || strings.Contains(line, "fork")
	}
	if !refused {
		t.Error("the shell never failed to fork")
	}
	count := len(hostProcsWith(marker))
	t.Logf("%d sleepers under a limit of 24 processes and threads", count)
	if count == 0 || count > 24 {
		t.Errorf("%d sleepers, want 1 to 24", count)
	}
	if err := exec.Command("/bin/true").Run(); err != nil {
		t.Errorf("host cannot start a process: %v", err)
	}
	_ = stdin.Close() // the intermediate kills the sandbox and reports
	var exit ExitInfo
	if err := json.Unmarshal([]byte(strings.TrimPrefix(lr.waitFor(t, "exit "), "exit ")), &exit); err != nil {
		t.Fatal(err)
	}
	if !exit.Killed {
		t.Errorf("exit %+v, want Killed", exit)
	}
	if left := hostProcsWith(marker); len(left) > 0 {
		t.Errorf("sleepers %v survived Kill", left)
	}
}

// unprivilegedRole is the intermediate of TestUnprivilegedParent.
func unprivilegedRole() int {
	sup := Probe()
	b, _ := json.Marshal(sup)
	fmt.Println("probe", string(b))
	marker := os.Getenv(markerEnv)
	// The inner shell forks sleepers until a fork fails (dash then gives
	// up); the outer one, using builtins only once the limit is reached,
	// reports and stays as the last sleeper. Everything goes to stdout, in
	// order.
	script := `read -r m < /proc/self/uid_map; echo "uid_map $m"; ` +
		`sh -c 'i=0; while [ $i -lt 100 ]; do sleep ` + marker + ` & i=$((i+1)); done' 2>&1; ` +
		`echo spawned; exec sleep ` + marker
	p, err := Start(context.Background(), Spec{
		Argv:   []string{"/bin/sh", "-c", script},
		Stdout: os.Stdout,
		Stderr: os.Stderr,
		Limits: Limits{Procs: 24},
	})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // until the test has counted
	if err := p.Kill(); err != nil {
		fmt.Println("error", err)
		return 1
	}
	e, _ := json.Marshal(p.Wait())
	fmt.Println("exit", string(e))
	return 0
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// TestMemoryLimit proves an allocation past the limit ends the program, and
// that the exit says so; under the RLIMIT_DATA fallback the program gets a
// MemoryError instead, whether it grows a list of chunks or one buffer, and
// its resident memory stays within the limit (and its code).
func TestMemoryLimit(t *testing.T) {
	t.Parallel()
	// The bombs stop themselves at 512 MiB, past every limit below: where
	// the limit does not hold they end with code 0 and the test fails,
	// instead of filling the machine.
	const chunks = `
chunks = []
try:
    while len(chunks) < 64:
        chunks.append(b"\x01" * (8 << 20))
except MemoryError:
    print("MemoryError after", len(chunks) * 8, "MiB", flush=True)
    raise SystemExit(3)
`
	t.Run("cgroup", func(t *testing.T) {
		needLayers(t, Relax{})
		spec := pySpec(t, chunks)
		spec.Limits.MemoryBytes = 64 << 20
		if !Probe().Layers(spec.Relax).Memory.Cgroup() {
			cannotSandbox(t, "no memory cgroup on this machine")
		}
		res := run(t, spec)
		if !res.exit.MemoryLimit || res.exit.Signal != syscall.SIGKILL || res.exit.Err != nil {
			t.Errorf("exit %+v, want MemoryLimit and SIGKILL (stdout %q)", res.exit, res.stdout)
		}
	})
	t.Run("rlimit", func(t *testing.T) {
		relax := Relax{Cgroups: true}
		needLayers(t, relax)
		if m := Probe().Layers(relax).Memory; m != KindRlimit {
			t.Fatalf("memory held by %q with cgroups relaxed, want rlimit", m)
		}
		for _, c := range []struct{ name, code string }{
			{"chunks", chunks},
			{"buffer", `
buf = bytearray()
try:
    while len(buf) < 512 << 20:
        buf += b"\x01" * (8 << 20)
except MemoryError:
    print("MemoryError after", len(buf) >> 20, "MiB", flush=True)
    raise SystemExit(3)
`},
		} {
			t.Run(c.name, func(t *testing.T) {
				const limit = 96 << 20
				spec := pySpec(t, c.code)
				spec.Limits.MemoryBytes = limit
				spec.Relax = relax
				res := run(t, spec)
				if res.exit.Code != 3 || !strings.HasPrefix(res.stdout, "MemoryError after") {
					t.Errorf("exit %+v stdout %q stderr %q, want a MemoryError", res.exit, res.stdout, res.stderr)
				}
				// Resident memory also counts the interpreter's code and
				// libraries, file pages the limit does not count.
				if res.exit.MaxRSS <= 0 || res.exit.MaxRSS > limit+codeBytes {
					t.Errorf("peak resident memory %d bytes, want at most the %d byte limit and %d of code", res.exit.MaxRSS, limit, codeBytes)
				}
				t.Logf("%s; peak RSS %d MiB", strings.TrimSpace(res.stdout), res.exit.MaxRSS>>20)
			})
		}
	})
}

// TestMemoryLimitGoProgram proves a Go program (as the TypeScript worker
// is) runs under the rlimit fallback and is stopped there: its runtime
// reserves over a gigabyte of address space at start, which RLIMIT_AS
// counted (it died before main), and RLIMIT_DATA does not. The program
// (this test binary in the "gomem" role) says it started, then touches
// 1 MiB chunks until it has four times the limit, which it must never
// reach: its runtime ends it "out of memory" (exit status 2) with its
// resident memory within the limit (and its code).
func TestMemoryLimitGoProgram(t *testing.T) {
	t.Parallel()
	relax := Relax{Cgroups: true}
	needLayers(t, relax)
	if m := Probe().Layers(relax).Memory; m != KindRlimit {
		t.Fatalf("memory held by %q with cgroups relaxed, want rlimit", m)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The race detector's shadow memory counts too.
	limit := int64(256 << 20)
	if raceEnabled {
		limit = 1 << 30
	}
	spec := Spec{
		Argv:   []string{exe},
		Env:    []string{roleEnv + "=gomem", fmt.Sprintf("%s=%d", goMemCapEnv, 4*limit>>20)},
		Limits: Limits{MemoryBytes: limit},
		Relax:  relax,
	}
	res := run(t, spec)
	t.Logf("exit %+v, peak RSS %d MiB, stdout %q", res.exit, res.exit.MaxRSS>>20, res.stdout)
	if !strings.HasPrefix(res.stdout, "started\n") {
		t.Fatalf("the Go program did not start: exit %+v stderr %.500q", res.exit, res.stderr)
	}
	// The runtime's fatal error exits 2; under the race detector, its
	// own allocator may be the one refused, and it exits 66.
	outOfMemory := (res.exit.Code == 2 && (strings.Contains(res.stderr, "out of memory") || strings.Contains(res.stderr, "cannot allocate memory"))) ||
		(raceEnabled && res.exit.Code == 66 && strings.Contains(res.stderr, "ThreadSanitizer failed to allocate"))
	if !outOfMemory || strings.Contains(res.stdout, "allocated") || res.exit.Err != nil {
		t.Errorf("exit %+v stdout %q stderr %.500q, want the runtime's out-of-memory exit before the cap", res.exit, res.stdout, res.stderr)
	}
	if res.exit.MaxRSS <= 0 || res.exit.MaxRSS > limit+codeBytes {
		t.Errorf("peak resident memory %d bytes, want at most the %d byte limit and %d of code", res.exit.MaxRSS, limit, codeBytes)
	}
}

// codeBytes bounds the file pages (the program's code and libraries) a
// program's resident memory holds besides what RLIMIT_DATA counts.
const codeBytes = 16 << 20

// goMemCapEnv is how many MiB the "gomem" role allocates at most.
const goMemCapEnv = "CYRNEL_SANDBOX_TEST_CAP_MIB"

// goMemRole is the Go program of TestMemoryLimitGoProgram.
func goMemRole() int {
	capMiB, err := strconv.Atoi(os.Getenv(goMemCapEnv))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("started")
	var chunks [][]byte
	for len(chunks) < capMiB {
		c := make([]byte, 1<<20)
		for i := 0; i < len(c); i += 4096 {
			c[i] = 1
		}
		chunks = append(chunks, c)
	}
	fmt.Println("allocated", len(chunks), "MiB")
	return 0
}

// TestCPULimitTreeWide proves the CPU limit holds the whole sandbox: a
// program whose forked workers together pass cpuSeconds is killed, the exit
// says CPULimit and Usage reports at least the limit. The control is the
// same program under per-process RLIMIT_CPU alone (cgroups relaxed, as all
// sandboxes were before): it ends normally.
func TestCPULimitTreeWide(t *testing.T) {
	t.Parallel()
	t.Run("cgroup", func(t *testing.T) {
		needLayers(t, Relax{})
		spec := pySpec(t, envtest.ForkBurn)
		spec.Limits.CPUSeconds = 1
		if Probe().Layers(spec.Relax).CPU == KindRlimit {
			cannotSandbox(t, "no CPU accounting cgroup on this machine")
		}
		p := start(t, spec)
		exit := waitDone(t, p)
		u := p.Usage()
		if !exit.CPULimit || exit.Killed || exit.Err != nil || u.CPU < time.Second {
			t.Errorf("exit %+v usage %+v, want CPULimit after at least 1 s of the tree's CPU", exit, u)
		}
		if u.PeakMemoryBytes <= 0 {
			t.Errorf("peak memory %d, want the interpreters' memory", u.PeakMemoryBytes)
		}
	})
	t.Run("control: per-process rlimit", func(t *testing.T) {
		relax := Relax{Cgroups: true}
		needLayers(t, relax)
		spec := pySpec(t, envtest.ForkBurn)
		spec.Limits.CPUSeconds = 1
		spec.Relax = relax
		res := run(t, spec)
		if res.exit.Code != 0 || res.exit.CPULimit || strings.TrimSpace(res.stdout) != "done" {
			t.Errorf("exit %+v stdout %q: the control should pass a per-process limit", res.exit, res.stdout)
		}
	})
}

// TestCPULimitRlimit proves RLIMIT_CPU ends a busy loop when no cgroup
// counts CPU time, and the exit says so.
func TestCPULimitRlimit(t *testing.T) {
	t.Parallel()
	relax := Relax{Cgroups: true}
	needLayers(t, relax)
	spec := pySpec(t, "while True: pass")
	spec.Limits.CPUSeconds = 1
	spec.Relax = relax
	res := run(t, spec)
	// The CPU time wait4 reports lags the rlimit's own accounting a bit.
	if !res.exit.CPULimit || res.exit.Signal != syscall.SIGXCPU || res.exit.CPUTime < 500*time.Millisecond {
		t.Errorf("exit %+v, want CPULimit by SIGXCPU after about a second of CPU", res.exit)
	}
}

// TestCPUQuota proves the CFS quota caps a sandbox's share: two processes
// spinning for a second under a fifth of a core are throttled by their
// cgroup and use about that fifth; the control, the same under more cores
// than the machine has, is never throttled.
func TestCPUQuota(t *testing.T) {
	t.Parallel()
	needLayers(t, Relax{})
	if !Probe().Layers(Relax{}).CPUQuota {
		cannotSandbox(t, "no CPU bandwidth cgroup on this machine")
	}
	// Eight spinners, each until it has had 40 ms of CPU: the group wants
	// 320 ms, which 0.2 cores give in no less than 1.6 s. Eight, so the
	// group still asks for more than its quota when a loaded machine gives
	// each process a small share (one spinner for a second was not
	// throttled at a load of 34 on 2 cores: it got less than 0.2 cores).
	const code = `
import os, sys, time
start = time.monotonic()
kids = []
for _ in range(7):
    pid = os.fork()
    if pid == 0:
        break
    kids.append(pid)
while time.process_time() < 0.04:
    pass
if pid == 0:
    os._exit(0)
for k in kids:
    os.waitpid(k, 0)
print("spun", time.monotonic() - start, flush=True)
sys.stdin.read()
`
	run := func(millicores int64) (throttled int64, used, wall time.Duration) {
		spec := pySpec(t, code)
		spec.Limits.CPUMillicores = millicores
		p, inW, lines := startPiped(t, spec)
		line := lines.waitFor(t, "spun")
		var secs float64
		if _, err := fmt.Sscanf(line, "spun %g", &secs); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		stat, err := os.ReadFile(p.cg.cpu + "/cpu.stat")
		throttled, ok := counter(stat, "nr_throttled")
		inW.Close()
		exit := waitDone(t, p)
		if err != nil || !ok || exit.Code != 0 {
			t.Fatalf("cpu.stat: %v, nr_throttled in it %v, exit %+v", err, ok, exit)
		}
		return throttled, p.Usage().CPU, time.Duration(secs * float64(time.Second))
	}
	throttled, used, wall := run(200)
	t.Logf("200 millicores: throttled %d times, used %v in %v", throttled, used, wall)
	// 0.2 cores over the run, plus a period's burst and the start.
	if throttled == 0 || used > wall/5+150*time.Millisecond {
		t.Errorf("under 200 millicores: throttled %d times, used %v in %v; the quota does not hold", throttled, used, wall)
	}
	if throttled, _, _ := run(int64(runtime.NumCPU()+1) * 1000); throttled != 0 {
		t.Errorf("control: throttled %d times with more cores than the machine has", throttled)
	}
}

// TestUsageReset proves ResetUsage starts the CPU time and the CPU limit
// over, as a worker serving several executions needs: a sandbox that burns
// 0.6 s twice under a 1 s limit survives when reset in between.
func TestUsageReset(t *testing.T) {
	t.Parallel()
	needLayers(t, Relax{})
	if Probe().Layers(Relax{}).CPU == KindRlimit {
		cannotSandbox(t, "no CPU accounting cgroup on this machine")
	}
	const code = `
import sys, time
for line in sys.stdin:
    if line.strip() == "big":
        big = bytearray(96 << 20)  # touched: zeroed pages are memory
        del big
    end = time.process_time() + 0.6
    while time.process_time() < end:
        pass
    print("burnt", flush=True)
`
	spec := pySpec(t, code)
	spec.Limits.CPUSeconds = 1
	p, inW, lines := startPiped(t, spec)
	var peaks [2]int64
	for i, cmd := range []string{"big", "go"} {
		p.ResetUsage()
		if _, err := fmt.Fprintln(inW, cmd); err != nil {
			t.Fatal(err)
		}
		lines.waitFor(t, "burnt")
		u := p.Usage()
		if u.CPU < 500*time.Millisecond || u.CPU > 900*time.Millisecond {
			t.Errorf("round %d: usage %v since the reset, want about 0.6 s", i, u.CPU)
		}
		peaks[i] = u.PeakMemoryBytes
	}
	// The peak starts over too where the kernel can reset it (v1; v2 from
	// 6.12, where memory.peak could be opened for writing).
	p.mu.Lock()
	resets := p.cg.memVersion == 1 || p.cg.peak != nil
	p.mu.Unlock()
	if resets && (peaks[0] < 96<<20 || peaks[1] > peaks[0]-64<<20) {
		t.Errorf("peaks %d then %d bytes: want the second round's without the first's 96 MiB", peaks[0], peaks[1])
	}
	inW.Close()
	if exit := waitDone(t, p); exit.Code != 0 || exit.CPULimit {
		t.Errorf("exit %+v, want a clean end: each round stayed under the limit", exit)
	}
}

// TestFileSizeLimit proves a write past RLIMIT_FSIZE fails (Python ignores
// SIGXFSZ, so it sees EFBIG) and the file stops at the limit.
func TestFileSizeLimit(t *testing.T) {
	t.Parallel()
	needLayers(t, Relax{})
	const code = `
import os
try:
    with open("big", "wb") as f:
        f.write(b"\0" * (2 << 20))
    print("wrote it all")
except OSError as e:
    print(e.errno, os.path.getsize("big"))
`
	spec := pySpec(t, code)
	spec.Limits.FileSizeBytes = 1 << 20
	res := run(t, spec)
	if want := fmt.Sprintf("%d %d", syscall.EFBIG, 1<<20); strings.TrimSpace(res.stdout) != want {
		t.Errorf("got %q (stderr %q), want %q", res.stdout, res.stderr, want)
	}
}

// TestReadFromWholeTextInOneRead: a counter file's text comes back whole,
// and a file longer than the buffer is an error, never a silently cut
// number.
func TestReadFromWholeTextInOneRead(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, c := range []struct {
		text string
		ok   bool
	}{{"123456789\n", true}, {strings.Repeat("usage_usec 1\n", 100), false}} {
		path := filepath.Join(dir, fmt.Sprint(len(c.text)))
		if err := os.WriteFile(path, []byte(c.text), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		for range 2 { // held open, read again from the start
			b, err := readFrom(f)
			if c.ok && (err != nil || string(b) != c.text) {
				t.Fatalf("readFrom = %q, %v; want %q", b, err, c.text)
			}
			if !c.ok && err == nil {
				t.Fatalf("readFrom of %d bytes = %d bytes, no error", len(c.text), len(b))
			}
		}
	}
}
