package sandbox

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMain lets the test binary act as its own sandbox helper: Start
// re-executes /proc/self/exe, which here is this binary, and MaybeRun must
// take over before m.Run parses the helper's arguments as test flags. The
// roles are the intermediate processes of the Pdeathsig and unprivileged
// tests, and the Go program of TestMemoryLimitGoProgram.
func TestMain(m *testing.M) {
	MaybeRun()
	switch os.Getenv(roleEnv) {
	case "pdeath":
		os.Exit(pdeathRole())
	case "unprivileged":
		os.Exit(unprivilegedRole())
	case "gomem":
		os.Exit(goMemRole())
	}
	os.Exit(m.Run())
}

const (
	roleEnv   = "CYRNEL_SANDBOX_TEST_ROLE"
	markerEnv = "CYRNEL_SANDBOX_TEST_MARKER"
)

// python is the real interpreter (never a pyenv shim) and its prefix.
type python struct{ exe, prefix string }

var pythonOnce = sync.OnceValues(func() (python, error) {
	out, err := exec.Command("python3", "-c", "import sys; print(sys.executable); print(sys.base_prefix)").Output()
	if err != nil {
		return python{}, fmt.Errorf("python3: %w", err)
	}
	lines := strings.Fields(string(out))
	if len(lines) != 2 {
		return python{}, fmt.Errorf("python3 said %q", out)
	}
	exe, err := filepath.EvalSymlinks(lines[0])
	if err != nil {
		return python{}, err
	}
	return python{exe: exe, prefix: lines[1]}, nil
})

func needPython(t testing.TB) python {
	t.Helper()
	py, err := pythonOnce()
	if err != nil {
		t.Fatalf("Python 3 is required: %v", err)
	}
	return py
}

// pySpec runs code with the real interpreter, isolated (-I -S).
func pySpec(t testing.TB, code string, args ...string) Spec {
	py := needPython(t)
	return Spec{
		Argv:      append([]string{py.exe, "-I", "-S", "-c", code}, args...),
		ReadPaths: []string{py.prefix},
	}
}

// needLayers fails the test when the kernel refuses a layer r keeps, unless
// the machine is declared unable to sandbox (CYRNEL_TEST_NO_SANDBOX names
// why): a test must not pass having tested nothing.
func needLayers(t testing.TB, r Relax) {
	t.Helper()
	if err := Probe().Check(r); err != nil {
		cannotSandbox(t, fmt.Sprintf("kernel forbids a layer: %v", err))
	}
}

// cannotSandbox stops a test that needs what this machine lacks: a skip only
// with the explicit opt-out, a failure otherwise.
func cannotSandbox(t testing.TB, why string) {
	t.Helper()
	if reason := os.Getenv("CYRNEL_TEST_NO_SANDBOX"); reason != "" {
		t.Skipf("%s (CYRNEL_TEST_NO_SANDBOX: %s)", why, reason)
	}
	t.Fatalf("%s; set CYRNEL_TEST_NO_SANDBOX=<why> on a machine that cannot sandbox", why)
}

// result is what a finished sandbox left behind.
type result struct {
	exit           ExitInfo
	stdout, stderr string
}

// run starts spec, waits for it (killing it if it hangs, as a guard only)
// and checks the sandbox left nothing on the host.
func run(t *testing.T, spec Spec) result {
	t.Helper()
	var out, errb syncBuffer
	if spec.Stdout == nil {
		spec.Stdout = &out
	}
	if spec.Stderr == nil {
		spec.Stderr = &errb
	}
	p := start(t, spec)
	exit := waitDone(t, p)
	return result{exit: exit, stdout: out.String(), stderr: errb.String()}
}

func start(t *testing.T, spec Spec) *Process {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := Start(ctx, spec)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return p
}

// waitDone waits for the sandbox to end and checks its clean-up: the init
// reaped, cgroups and host work directory removed.
func waitDone(t *testing.T, p *Process) ExitInfo {
	t.Helper()
	pid := p.Pid()
	select {
	case <-p.Done():
	case <-time.After(2 * time.Minute):
		_ = p.Kill()
		<-p.Done()
		t.Errorf("sandbox still running after 2 minutes; killed")
	}
	// Reaped: no process (zombie or not) with that pid is our child.
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(os.Getpid()) {
			t.Errorf("init %d not reaped after Done: %s", pid, stat)
		}
	}
	if p.cg != nil {
		for _, dir := range p.cg.dirs() {
			if _, err := os.Stat(dir); err == nil {
				t.Errorf("cgroup %s left behind", dir)
			}
		}
	}
	if p.workDir != "" {
		if _, err := os.Stat(p.workDir); err == nil {
			t.Errorf("work dir %s left behind", p.workDir)
		}
	}
	return p.Exit()
}

// syncBuffer is a bytes.Buffer safe to read while a sandbox writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// lineReader hands out the lines a sandbox writes to a pipe.
type lineReader struct {
	lines chan string
}

// startPiped starts spec with its stdin and stdout on pipes: the program
// is told what to do on stdin and says what it did on stdout.
func startPiped(t *testing.T, spec Spec) (p *Process, stdin *os.File, stdout *lineReader) {
	t.Helper()
	in, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { out.Close(); inW.Close() })
	spec.Stdin, spec.Stdout = in, outW
	p = start(t, spec)
	in.Close()
	outW.Close()
	return p, inW, newLineReader(out)
}

func newLineReader(r io.Reader) *lineReader {
	lr := &lineReader{lines: make(chan string, 1024)}
	go func() {
		defer close(lr.lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			lr.lines <- sc.Text()
		}
	}()
	return lr
}

// waitFor returns the first line with the prefix, failing the test if the
// stream ends or the deadline passes first.
func (lr *lineReader) waitFor(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case line, ok := <-lr.lines:
			if !ok {
				t.Fatalf("stream ended before a line starting %q", prefix)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-deadline:
			t.Fatalf("no line starting %q within a minute", prefix)
		}
	}
}

// next returns the next line.
func (lr *lineReader) next(t *testing.T) string {
	t.Helper()
	select {
	case line, ok := <-lr.lines:
		if !ok {
			t.Fatal("stream ended")
		}
		return line
	case <-time.After(time.Minute):
		t.Fatal("no line within a minute")
	}
	return ""
}

func newMarker() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "cyrnel-canary-" + hex.EncodeToString(b[:])
}

// hostProcsWith returns the host pids whose command line contains marker.
func hostProcsWith(marker string) []int {
	return hostProcs(func(cmdline []byte) bool { return bytes.Contains(cmdline, []byte(marker)) })
}

// hostProcsNamed returns the host pids whose argv[0] is name.
func hostProcsNamed(name string) []int {
	return hostProcs(func(cmdline []byte) bool { return bytes.HasPrefix(cmdline, []byte(name+"\x00")) })
}

func hostProcs(match func(cmdline []byte) bool) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && match(cmdline) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitGone waits, up to a bound, until no host process carries marker.
func waitGone(t *testing.T, marker string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		left := hostProcsWith(marker)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes %v with marker still alive after %v", left, within)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a bound
	}
}

// pyJSON runs a Python program that prints one JSON object and decodes it.
func pyJSON(t *testing.T, spec Spec) (map[string]any, result) {
	t.Helper()
	res := run(t, spec)
	var out map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(res.stdout)), &out); err != nil {
		t.Fatalf("program output is not JSON: %v\nexit %+v\nstdout: %s\nstderr: %s", err, res.exit, res.stdout, res.stderr)
	}
	return out, res
}
