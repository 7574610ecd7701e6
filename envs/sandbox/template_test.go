package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
