package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// sandboxID is the uid and gid the program has inside the user namespace.
const sandboxID = 1000

// allNamespaces are the namespaces of a sandbox with the network cut off.
const allNamespaces = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID | syscall.CLONE_NEWNS |
	syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP | syscall.CLONE_NEWNET

// hooked is set by MaybeRun in a normal (non-helper) process: only then does
// re-executing the binary reach the helper instead of, say, the whole test
// suite again.
var hooked atomic.Bool

var discardLogger = slog.New(slog.DiscardHandler)

// ExitInfo says how a sandboxed program ended.
type ExitInfo struct {
	// Code is the program's exit status; -1 when a signal ended it or it
	// never ran.
	Code int
	// Signal is the signal that ended the program (SIGKILL after Kill);
	// 0 when it exited.
	Signal syscall.Signal
	// Killed is set when Kill ended the sandbox before the program ended.
	Killed bool
	// MemoryLimit: the memory cgroup's OOM killer ended a process of the
	// sandbox. (Under the RLIMIT_DATA fallback an allocation fails
	// instead, which the program sees, e.g. as MemoryError, or which ends
	// a Go program with "fatal error: runtime: out of memory" and exit
	// status 2; nothing tells the sandbox, so MemoryLimit stays false.
	// See docs/sandbox.md.)
	MemoryLimit bool
	// CPULimit: the sandbox used up its CPU time: the host killed it when
	// its CPU cgroup passed the limit, or (without one) RLIMIT_CPU ended
	// the program (SIGXCPU, or SIGKILL once its CPU time reached it).
	CPULimit bool
	// ProcLimit: the pids cgroup refused at least one fork.
	ProcLimit bool
	// CPUTime is the user plus system time of the program and the children
	// it waited for; MaxRSS its peak resident set in bytes.
	CPUTime time.Duration
	MaxRSS  int64
	// Err is set when the sandbox itself failed: its init ended without
	// saying how the program did, and neither Kill nor the memory limit
	// explains it.
	Err error
}

// Process is a running sandbox. One goroutine, locked to the OS thread that
// forked the sandbox's init (Pdeathsig follows that thread), owns it: it
// reaps the init, removes the sandbox's cgroups and work directory, and
// then closes Done.
type Process struct {
	layers Layers
	cg     *cgroups
	// cgSlots takes cg back for reuse instead of its removal (a forked
	// child's).
	cgSlots *cgroupSlots
	// keeper forked this program, in the keeper's cgroups: they are the
	// keeper's to give back, and the keeper is taken back at the end
	// when its report says clean.
	keeper      *keeper
	keeperClean bool
	// keeps: this is a keeper's own process, whose
	// end reads and gives back the cgroups only once the keeper's
	// program, if any, has ended.
	keeps    *keeper
	workDir  string // host directory to remove; "" with namespaces
	cpuLimit time.Duration
	// cpuRate is the most CPU the sandbox can use per second of wall
	// time, in millicores: it paces the CPU watch.
	cpuRate int64
	logger  *slog.Logger

	// procSubset: the init mounted the pid-only /proc (its start report).
	procSubset bool

	// hostID is the host uid and gid of the program and the owner of its
	// user namespace, taken from ids for the sandbox's life; 0 when the
	// host cannot give one (unprivileged, or no namespaces).
	hostID int
	ids    *idPool
	// idsAfter, when set, delays giving hostID back until it is closed:
	// a forked child nobody hears of any more may still hold it.
	idsAfter <-chan struct{}

	mu     sync.Mutex
	proc   *os.Process // the init; nil until started
	reaped bool
	killed bool
	// forked: a child of a Template; pidfd reaches its program (PID 1 of
	// its namespaces), -1 until the child reported it.
	forked bool
	pidfd  int
	// cpuOver: the CPU watch killed the sandbox for passing cpuLimit.
	cpuOver bool
	// cpuBase is the cgroup's CPU time at the last ResetUsage.
	cpuBase time.Duration
	// ended: final holds the last usage; the cgroups may be gone.
	ended bool
	final Usage

	done chan struct{}
	exit ExitInfo
}

// Start starts spec.Argv in a new sandbox and returns once the program runs
// (or failed to start). ctx bounds the start only; use Kill to end the
// program. Layers spec.Relax does not relax must be available (see
// Support.Check), else Start fails.
func Start(ctx context.Context, spec Spec) (*Process, error) {
	if !hooked.Load() {
		return nil, errNotHooked
	}
	readPaths, err := spec.validate()
	if err != nil {
		return nil, err
	}
	sup := Probe()
	if err := sup.Check(spec.Relax); err != nil {
		return nil, err
	}
	limits := spec.Limits.withDefaults()
	p := &Process{
		layers:   sup.Layers(spec.Relax),
		cpuLimit: time.Duration(limits.CPUSeconds) * time.Second,
		cpuRate:  int64(runtime.NumCPU()) * 1000,
		logger:   spec.Logger,
		done:     make(chan struct{}),
	}
	if p.layers.CPUQuota {
		p.cpuRate = min(p.cpuRate, limits.CPUMillicores)
	}
	if p.logger == nil {
		p.logger = discardLogger
	}
	is := initSpec{
		Namespaces: p.layers.Namespaces,
		ReadPaths:  readPaths,
		TmpBytes:   limits.TmpBytes,
		ExtraFiles: len(spec.ExtraFiles),
		ExecStage:  !p.layers.Memory.Cgroup() || !p.layers.Procs.Cgroup(),
	}
	var flags uintptr
	workDir := sandboxTmp
	writePaths := []string{sandboxTmp, "/dev/shm"}
	if p.layers.Namespaces {
		flags = allNamespaces
		if spec.Relax.Network {
			flags &^= syscall.CLONE_NEWNET
		}
	} else {
		// No private /tmp without a mount namespace: a host directory
		// only the sandbox may write (Landlock) serves, removed at exit.
		if workDir, err = os.MkdirTemp("", "cyrnel-sandbox-"); err != nil {
			return nil, fmt.Errorf("sandbox: work dir: %w", err)
		}
		p.workDir, is.WorkDir = workDir, workDir
		writePaths = []string{workDir}
	}
	is.Exec = execSpec{
		Argv:         spec.Argv,
		Env:          environ(workDir, spec.Env),
		ReadPaths:    readPaths,
		WritePaths:   writePaths,
		Limits:       limits,
		MemoryRlimit: p.layers.Memory == KindRlimit,
		CPURlimit:    p.layers.CPU == KindRlimit,
		Landlock:     p.layers.LandlockABI > 0,
		Seccomp:      p.layers.Seccomp,
		Network:      spec.Relax.Network,
	}
	if !spec.Relax.Cgroups && (sup.Memory.OK() || sup.Pids.OK() || sup.CPU.OK() || sup.CPUAcct.OK()) {
		if p.cg, err = newCgroups(sup, limits); err != nil {
			p.cleanup()
			return nil, fmt.Errorf("sandbox: %w", err)
		}
	}
	err = p.start(ctx, launch{
		cloneflags: flags,
		init:       is,
		stdin:      spec.Stdin,
		stdout:     spec.Stdout,
		stderr:     spec.Stderr,
		extra:      spec.ExtraFiles,
	})
	if err != nil {
		return nil, err
	}
	if p.layers.CPU != KindRlimit {
		go p.watchCPU()
	}
	return p, nil
}

// Layers says which layers hold this sandbox.
func (p *Process) Layers() Layers { return p.layers }

// Pid is the host pid of the sandbox's init (the program's parent).
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.proc == nil {
		return 0
	}
	return p.proc.Pid
}

// Kill ends the sandbox: SIGKILL to its init, upon which the kernel kills
// every other process in its PID namespace, setsid'd ones included. Without
// namespaces it also kills the init's process group and whatever is left in
// the sandbox's cgroups. Killing an ended sandbox does nothing.
func (p *Process) Kill() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.killed = true
	return p.killLocked()
}

func (p *Process) killLocked() error {
	if p.forked {
		if p.pidfd >= 0 && !p.reaped {
			// The kernel kills the rest of its PID namespace with it.
			_ = unix.PidfdSendSignal(p.pidfd, unix.SIGKILL, nil, 0) // gone already is fine
		}
		return nil
	}
	if p.proc == nil || p.reaped {
		return nil // not started yet (the owner kills it once it is) or gone
	}
	err := p.proc.Kill()
	if errors.Is(err, os.ErrProcessDone) {
		err = nil
	}
	if !p.layers.Namespaces {
		// The init is not yet reaped (p.reaped is false under p.mu),
		// so its pid, the group's id, cannot have been reused.
		_ = syscall.Kill(-p.proc.Pid, syscall.SIGKILL) // an empty group is fine
		if p.cg != nil {
			p.cg.killAll()
		}
	}
	if err != nil {
		return fmt.Errorf("sandbox: kill: %w", err)
	}
	return nil
}

// Signal sends sig to the sandbox's init, which forwards SIGTERM, SIGINT,
// SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the program (to its process group,
// with namespaces). Other signals reach the init alone; SIGKILL is Kill.
func (p *Process) Signal(sig os.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.forked {
		if s, ok := sig.(syscall.Signal); ok && p.pidfd >= 0 && !p.reaped {
			_ = unix.PidfdSendSignal(p.pidfd, s, nil, 0) // gone already is fine
		}
		return nil
	}
	if p.proc == nil || p.reaped {
		return nil
	}
	if err := p.proc.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("sandbox: signal: %w", err)
	}
	return nil
}

// Done is closed once the sandbox has ended, been reaped and cleaned up.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exit says how the program ended; valid once Done is closed.
func (p *Process) Exit() ExitInfo { return p.exit }

// Wait waits for Done and returns Exit.
func (p *Process) Wait() ExitInfo {
	<-p.done
	return p.exit
}
