package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cyrnel/cyrnel/envs/affinity"
)

// Files are the child's ends of its six pipes: fds 1 and 2 (raw output),
// fds 3 and 4 (the JSON-RPC stream, host to worker and back) and fds 5 and
// 6 (the calls of the program's main thread: answers in, requests out).
type Files struct {
	Stdout, Stderr, ProtoIn, ProtoOut, CallIn, CallOut *os.File
}

// Extra are the files that become fds 3, 4, … in the child, in order.
func (f Files) Extra() []*os.File {
	return []*os.File{f.ProtoIn, f.ProtoOut, f.CallIn, f.CallOut}
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
	// OutOfMemory are texts the runtime writes to its stderr when it runs
	// out of memory: a worker that wrote one and died ended at its memory
	// limit, as the cgroup's OOM killer would have said (under the rlimit
	// fallback nothing else says so). Only for a runtime whose stderr its
	// programs cannot write to, such as the TypeScript worker's.
	OutOfMemory []string
	// FollowHost: the worker's processes follow the host onto one CPU
	// while it is pinned (envs/affinity), for a worker that answers each
	// request in microseconds, so the two trade the CPU instead of waking
	// each other across CPUs.
	FollowHost bool
}

// Plain launches workers as ordinary child processes in their own process
// group, killed as a group. It isolates nothing: the sandbox launcher is the
// default; Plain exists for machines and operators that opt out.
type Plain struct{}

type plainHandle struct {
	pid  int
	done chan struct{}
	exit Exit

	// mu orders kills with the reaping: once the leader is reaped its pid
	// (the group's id) can be recycled, so a kill after that would hit a
	// stranger's group.
	mu     sync.Mutex
	reaped bool
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
		cmd.ExtraFiles = f.Extra()
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := affinity.Process.Spawn(cmd.Start); err != nil {
			started <- fmt.Errorf("start %s: %w", c.Path, err)
			return
		}
		h.pid = cmd.Process.Pid
		started <- nil
		// Wait for the leader to exit without reaping it: as a zombie it
		// keeps its pid, so the group may be killed (it may outlive its
		// leader: children that did not setsid) before the pid is free.
		waitExited(h.pid)
		_ = syscall.Kill(-h.pid, syscall.SIGKILL)
		h.mu.Lock()
		_ = cmd.Wait() // the exit status below says all Wait can
		h.reaped = true
		h.mu.Unlock()
		h.exit = exitOf(cmd.ProcessState)
		close(h.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return h, nil
}

// Kill kills the worker's process group unless its leader is reaped.
func (h *plainHandle) Kill() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.reaped {
		_ = syscall.Kill(-h.pid, syscall.SIGKILL)
	}
}

// waitExited waits until process pid has exited, leaving it unreaped.
func waitExited(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return // on any other error Wait reports what it can
		}
	}
}

func (h *plainHandle) Done() <-chan struct{} { return h.done }
func (h *plainHandle) Exit() Exit            { return h.exit }
func (h *plainHandle) Pid() int              { return h.pid }

func exitOf(ps *os.ProcessState) Exit {
	if ps == nil {
		return Exit{Code: -1}
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return Exit{Code: -1, Signal: ws.Signal()}
	}
	return Exit{Code: ps.ExitCode()}
}
