package worker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// Files are the child's ends of its four pipes: fds 1 and 2 (raw output) and
// fds 3 and 4 (the JSON-RPC stream, host to worker and back).
type Files struct {
	Stdout, Stderr, ProtoIn, ProtoOut *os.File
}

// Exit says how a worker process ended.
type Exit struct {
	Code   int            // -1 when killed by a signal
	Signal syscall.Signal // 0 unless killed by a signal
	// MemoryLimit and CPULimit are set when a launcher knows a limit ended
	// the process.
	MemoryLimit bool
	CPULimit    bool
}

func (e Exit) String() string {
	if e.Signal != 0 {
		return "killed by signal " + e.Signal.String()
	}
	return fmt.Sprintf("exit status %d", e.Code)
}

// Handle is a started worker process. One goroutine owns and reaps it; Done
// is closed once it has been reaped.
type Handle interface {
	Kill()
	Done() <-chan struct{}
	Exit() Exit // valid after Done
}

// Launcher starts a worker process with the given pipes (the sandbox is
// one). The launcher owns the worker's private working directory.
type Launcher interface {
	Launch(ctx context.Context, cmd Command, files Files) (Handle, error)
}

// Command is what to run: an absolute path (the real executable, never a
// shim), its arguments, and environment entries added to the launcher's
// fixed base (nothing comes from the host's environment).
type Command struct {
	Path string
	Args []string // without argv[0]
	Env  []string
}

// Plain launches workers as ordinary child processes in their own process
// group, killed as a group. It isolates nothing: the sandbox launcher is the
// default; Plain exists for machines and operators that opt out.
type Plain struct{}

type plainHandle struct {
	pid  int
	done chan struct{}
	exit Exit
}

// Launch starts the process from a goroutine locked to its OS thread, because
// Pdeathsig fires when the thread that forked the child exits, not the
// process; the goroutine stays locked until it has reaped the child, then
// removes the work directory.
func (Plain) Launch(_ context.Context, c Command, f Files) (Handle, error) {
	dir, err := os.MkdirTemp("", "cyrnel-work-")
	if err != nil {
		return nil, fmt.Errorf("create work dir: %w", err)
	}
	h := &plainHandle{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer os.RemoveAll(dir)
		cmd := exec.Command(c.Path, c.Args...)
		cmd.Args[0] = c.Path
		cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "TMPDIR=" + dir, "LANG=C.UTF-8"}, c.Env...)
		cmd.Dir = dir
		cmd.Stdin = nil
		cmd.Stdout = f.Stdout
		cmd.Stderr = f.Stderr
		cmd.ExtraFiles = []*os.File{f.ProtoIn, f.ProtoOut}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			started <- fmt.Errorf("start %s: %w", c.Path, err)
			return
		}
		h.pid = cmd.Process.Pid
		started <- nil
		_ = cmd.Wait() // the exit status below says all Wait can
		h.exit = exitOf(cmd.ProcessState)
		// The group may outlive its leader (children that did not setsid).
		_ = syscall.Kill(-h.pid, syscall.SIGKILL)
		close(h.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return h, nil
}

func (h *plainHandle) Kill()                 { _ = syscall.Kill(-h.pid, syscall.SIGKILL) }
func (h *plainHandle) Done() <-chan struct{} { return h.done }
func (h *plainHandle) Exit() Exit            { return h.exit }

func exitOf(ps *os.ProcessState) Exit {
	if ps == nil {
		return Exit{Code: -1}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Exit{Code: -1, Signal: ws.Signal()}
	}
	return Exit{Code: ps.ExitCode()}
}
