package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

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
// The same template without that preload starts (the other template tests).
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
