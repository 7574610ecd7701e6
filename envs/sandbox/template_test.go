package sandbox

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// templateBoot starts the runtime's template from the repository's copy.
const templateBoot = "import sys; sys.path[:0] = [sys.argv[1]]; from cyrnel._template import main; sys.exit(main(sys.argv[2:]))"

func needTemplate(t testing.TB) {
	t.Helper()
	if why := TemplateUnavailable(Relax{}); why != "" {
		t.Skipf("no forking template here: %s", why)
	}
}

// startTemplate starts a template of the real interpreter with the runtime
// from this repository and the given preload list.
func startTemplate(t testing.TB, limits Limits, preload ...string) *Template {
	return startTemplateWith(t, limits, nil, preload...)
}

func startTemplateWith(t testing.TB, limits Limits, readPaths []string, preload ...string) *Template {
	t.Helper()
	needTemplate(t)
	py := needPython(t)
	runtimeDir, err := filepath.Abs("../../python")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tpl, err := StartTemplate(ctx, TemplateSpec{
		Argv:      append([]string{py.exe, "-I", "-S", "-c", templateBoot, runtimeDir}, preload...),
		ReadPaths: append([]string{py.prefix, runtimeDir, "/usr/lib/python3/dist-packages"}, readPaths...),
		Limits:    limits,
		Stderr:    os.Stderr,
	})
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
	stdoutR, stdoutW, _ := os.Pipe()
	stderrR, stderrW, _ := os.Pipe()
	reqR, reqW, _ := os.Pipe()
	ansR, ansW, _ := os.Pipe()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := tpl.Fork(ctx, stdoutW, stderrW, []*os.File{reqR, ansW})
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
import os
print(os.getpid(), os.getuid(), sorted(p for p in os.listdir("/proc") if p.isdigit()), os.uname().nodename)
`)
	fmt.Println(out)
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
	tpl := startTemplateWith(t, Limits{}, []string{dir})
	f := fork(t, tpl)
	out := f.output(t, fmt.Sprintf("print(open(%q).read())", filepath.Join(dir, "data.txt")))
	if strings.TrimSpace(out) != "kept" {
		t.Fatalf("read %q, want kept", out)
	}
}
