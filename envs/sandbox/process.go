package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
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
	cgSlots  *cgroupSlots
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

// Usage is what a sandbox has used since Start or the last ResetUsage.
type Usage struct {
	// CPU is the CPU time of all its processes, the ended ones included;
	// 0 without a CPU accounting cgroup.
	CPU time.Duration
	// PeakMemoryBytes is the most memory it held at once (with the
	// page cache and tmpfs pages charged to it); 0 without a memory
	// cgroup.
	PeakMemoryBytes int64
}

// Usage reports the sandbox's usage from its cgroups' own counters, live
// or, once it has ended, as they were at the end.
func (p *Process) Usage() Usage {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return p.final
	}
	return p.usageLocked()
}

func (p *Process) usageLocked() Usage {
	var u Usage
	if p.cg == nil {
		return u
	}
	if p.cg.acctVersion != 0 {
		if cpu, err := p.cg.cpuUsage(); err != nil {
			p.logger.Warn("sandbox usage", "err", err)
		} else {
			u.CPU = max(cpu-p.cpuBase, 0)
		}
	}
	if p.cg.memVersion != 0 {
		if peak, err := p.cg.peakMemory(); err != nil {
			p.logger.Warn("sandbox usage", "err", err)
		} else {
			u.PeakMemoryBytes = peak
		}
	}
	return u
}

// ResetUsage starts Usage and the CPU limit over: a worker serving several
// executions in one sandbox accounts for, and limits, each one alone. On
// cgroup v2 before kernel 6.12 the peak memory cannot be reset and stays
// the sandbox's lifetime peak.
func (p *Process) ResetUsage() {
	p.mu.Lock()
	if p.ended || p.cg == nil {
		p.mu.Unlock()
		return
	}
	if p.cg.acctVersion != 0 {
		if cpu, err := p.cg.cpuUsage(); err == nil {
			p.cpuBase = cpu
		}
	}
	if err := p.cg.resetPeak(); err != nil {
		p.logger.Warn("sandbox usage", "err", err)
	}
	// The CPU watch needs no wake-up: a new base only leaves more of the
	// limit, so its next look, due sooner than that requires, recomputes.
	p.mu.Unlock()
}

// cpuWatchFloor is the shortest pause between two looks at the CPU cgroup.
const cpuWatchFloor = 10 * time.Millisecond

// watchCPU kills the sandbox once its CPU cgroup has used cpuLimit. The
// sandbox cannot use more than cpuRate, so the next look is due no sooner
// than the time the rest of the limit takes at that rate: a sandbox far
// from its limit costs one read now and then.
func (p *Process) watchCPU() {
	for {
		p.mu.Lock()
		if p.ended {
			p.mu.Unlock()
			return
		}
		used, err := p.cg.cpuUsage()
		left := p.cpuLimit - (used - p.cpuBase)
		if err == nil && left <= 0 {
			p.cpuOver = true
			if err := p.killLocked(); err != nil {
				p.logger.Warn("sandbox CPU limit", "err", err)
			}
		}
		p.mu.Unlock()
		if err != nil {
			p.logger.Warn("sandbox CPU limit: stop watching", "err", err)
			return
		}
		if left <= 0 {
			return
		}
		t := time.NewTimer(max(time.Duration(int64(left)*1000/p.cpuRate), cpuWatchFloor))
		select {
		case <-t.C:
		case <-p.done:
			t.Stop()
			return
		}
	}
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

// launch is how to start one init.
type launch struct {
	cloneflags     uintptr
	init           initSpec
	stdin          io.Reader
	stdout, stderr io.Writer
	extra          []*os.File
}

// start starts the owner goroutine and waits until the init reports that
// the program runs, or fails. The owner cleans up either way.
func (p *Process) start(ctx context.Context, l launch) error {
	if l.cloneflags&syscall.CLONE_NEWUSER != 0 && os.Geteuid() == 0 {
		if err := p.takeID(); err != nil {
			return p.abort(err)
		}
	}
	id := newIdentity(os.Geteuid(), os.Getegid(), p.hostID)
	if l.cloneflags != 0 {
		l.init.DropToSandboxID = id.drop
	}
	// The init unshares its cgroup namespace itself, once the host has
	// moved it into the sandbox's cgroups, so /proc/self/cgroup shows "/"
	// rather than the host's cgroup path (which names the host's pid).
	if l.cloneflags&syscall.CLONE_NEWCGROUP != 0 {
		l.cloneflags &^= syscall.CLONE_NEWCGROUP
		l.init.CgroupNS = true
	}
	spec, err := json.Marshal(l.init)
	if err != nil {
		return p.abort(fmt.Errorf("sandbox: encode spec: %w", err))
	}
	specR, specW, err := os.Pipe()
	if err != nil {
		return p.abort(fmt.Errorf("sandbox: spec pipe: %w", err))
	}
	statusR, statusW, err := os.Pipe()
	if err != nil {
		closeAll(specR, specW)
		return p.abort(fmt.Errorf("sandbox: status pipe: %w", err))
	}
	cmd := &exec.Cmd{
		Path: helperExe(),
		Args: []string{"cyrnel-sandbox-init", argInit},
		// Empty, not nil: the init's /proc/<pid>/environ must not hold
		// the host's environment, which may carry secrets.
		Env:         []string{},
		Dir:         "/",
		Stdin:       l.stdin,
		Stdout:      l.stdout,
		Stderr:      l.stderr,
		ExtraFiles:  append([]*os.File{specR, statusW}, l.extra...),
		SysProcAttr: sysProcAttr(l.cloneflags, id),
		// Output copied through pipes Start made (non-*os.File writers)
		// is abandoned this long after the init ends.
		WaitDelay: time.Second,
	}
	started := make(chan error, 1)
	go p.own(cmd, spec, specR, specW, statusR, statusW, started)
	select {
	case err := <-started:
		return err
	case <-ctx.Done():
		_ = p.Kill() // the owner reaps and cleans up
		<-started
		return fmt.Errorf("sandbox: start: %w", ctx.Err())
	}
}

// abort ends a sandbox that never started.
func (p *Process) abort(err error) error {
	p.exit = ExitInfo{Code: -1, Err: err}
	p.cleanup()
	close(p.done)
	return err
}

// identity is how the user namespace maps ids, decided by the host's euid.
type identity struct {
	uids, gids []syscall.SysProcIDMap
	// initID is the init's uid and gid inside the namespace.
	initID int
	// drop: the init must switch to sandboxID once the root is built.
	drop bool
}

// newIdentity maps the sandbox's ids. A root host maps sandboxID to the
// sandbox's own hostID and keeps its own root as the init's, so the init can
// still bind paths only root may traverse (a 0700 parent) before it drops
// to sandboxID. An unprivileged host may write only the one mapping of its
// own ids, which the init and the program share.
func newIdentity(uid, gid, hostID int) identity {
	if uid != 0 {
		return identity{
			uids:   []syscall.SysProcIDMap{{ContainerID: sandboxID, HostID: uid, Size: 1}},
			gids:   []syscall.SysProcIDMap{{ContainerID: sandboxID, HostID: gid, Size: 1}},
			initID: sandboxID,
		}
	}
	return identity{
		uids:   []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: sandboxID, HostID: hostID, Size: 1}},
		gids:   []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}, {ContainerID: sandboxID, HostID: hostID, Size: 1}},
		initID: 0,
		drop:   true,
	}
}

// sysProcAttr starts the init in new namespaces with the ids of id, gives it
// CAP_SYS_ADMIN there (to mount), and ties its life to the calling thread
// with Pdeathsig.
func sysProcAttr(cloneflags uintptr, id identity) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cloneflags == 0 {
		return attr
	}
	attr.Cloneflags = cloneflags
	attr.UidMappings, attr.GidMappings = id.uids, id.gids
	// Only a privileged caller may allow setgroups; it then drops its
	// supplementary groups (Credential.Groups is empty). An unprivileged
	// caller keeps them, as the kernel demands.
	attr.GidMappingsEnableSetgroups = id.drop
	attr.Credential = &syscall.Credential{Uid: uint32(id.initID), Gid: uint32(id.initID)}
	if id.initID != 0 {
		// uid 0 of the namespace has every capability of it at exec.
		attr.AmbientCaps = []uintptr{unix.CAP_SYS_ADMIN}
	}
	return attr
}

// own is the owner goroutine: it starts the init from its locked thread,
// hands it the spec, relays the start report, then reaps the init, collects
// the exit report and cleans up.
func (p *Process) own(cmd *exec.Cmd, spec []byte, specR, specW, statusR, statusW *os.File, started chan<- error) {
	runtime.LockOSThread()
	defer close(p.done)
	var err error
	if p.hostID != 0 {
		// The init's user namespace must belong to the sandbox's uid.
		var restored bool
		if err, restored = asOwner(p.hostID, cmd.Start); restored {
			defer runtime.UnlockOSThread()
		}
	} else {
		err = cmd.Start()
		defer runtime.UnlockOSThread()
	}
	closeAll(specR, statusW) // the init has its copies
	if err != nil {
		closeAll(specW, statusR)
		err = fmt.Errorf("sandbox: start helper: %w", err)
		p.exit = ExitInfo{Code: -1, Err: err}
		p.cleanup()
		started <- err
		return
	}
	p.mu.Lock()
	p.proc = cmd.Process
	killed := p.killed
	p.mu.Unlock()
	startErr := p.handOver(cmd.Process.Pid, spec, specW)
	if killed || startErr != nil {
		_ = cmd.Process.Kill() // not reaped yet: cannot fail
	}
	dec := json.NewDecoder(statusR)
	var first report
	if err := dec.Decode(&first); startErr == nil {
		switch {
		case err != nil:
			startErr = errors.New("sandbox: the helper ended before reporting (does the binary call sandbox.MaybeRun first thing?)")
		case first.Error != "":
			startErr = errors.New(first.Error)
		case !first.Started:
			startErr = fmt.Errorf("sandbox: unexpected first report %+v", first)
		}
		p.procSubset = first.ProcSubset
	}
	if startErr != nil {
		_ = cmd.Process.Kill()
	}
	started <- startErr

	waitErr := cmd.Wait()
	p.mu.Lock()
	p.reaped = true
	p.mu.Unlock()
	var exit *exitReport
	var initErr string
	for {
		var r report
		if dec.Decode(&r) != nil {
			break // EOF: the init is gone
		}
		if r.Exit != nil {
			exit = r.Exit
		}
		if r.Error != "" {
			initErr = r.Error
		}
	}
	_ = statusR.Close()
	p.exit = p.exitInfo(cmd.ProcessState, waitErr, exit, initErr)
	p.mu.Lock()
	p.final, p.ended = p.usageLocked(), true
	p.mu.Unlock()
	p.cleanup()
}

// handOver moves the init into the sandbox's cgroups, then sends it the
// spec: the init reads the spec before it starts anything, so every process
// of the sandbox is born inside the cgroups.
func (p *Process) handOver(pid int, spec []byte, specW *os.File) error {
	defer specW.Close()
	if p.cg != nil {
		if err := p.cg.add(pid); err != nil {
			return fmt.Errorf("sandbox: %w", err)
		}
	}
	if _, err := specW.Write(spec); err != nil {
		return fmt.Errorf("sandbox: send spec: %w", err)
	}
	return nil
}

func (p *Process) exitInfo(state *os.ProcessState, waitErr error, r *exitReport, initErr string) ExitInfo {
	info := ExitInfo{Code: -1}
	if p.cg != nil {
		info.MemoryLimit = p.cg.oomKilled()
		info.ProcLimit = p.cg.forkRefused()
	}
	if r != nil {
		info.Code = r.Code
		info.Signal = syscall.Signal(r.Signal)
		info.CPUTime = time.Duration(r.CPUNanos)
		info.MaxRSS = r.MaxRSSKiB << 10
	} else {
		// The init ended without a report: Kill, the OOM killer, the
		// host dying — or a failure of the sandbox itself.
		if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			info.Signal = ws.Signal()
		}
		p.mu.Lock()
		info.Killed = p.killed
		cpuOver := p.cpuOver
		p.mu.Unlock()
		if !info.Killed && !info.MemoryLimit && !cpuOver {
			info.Err = fmt.Errorf("sandbox: init ended without a report (%v)", state)
			if initErr != "" {
				info.Err = errors.New(initErr)
			} else if waitErr != nil && !errors.As(waitErr, new(*exec.ExitError)) {
				info.Err = fmt.Errorf("sandbox: wait: %w", waitErr)
			}
		}
	}
	p.mu.Lock()
	info.CPULimit = p.cpuOver
	p.mu.Unlock()
	if p.layers.CPU == KindRlimit {
		info.CPULimit = info.Signal == syscall.SIGXCPU ||
			(info.Signal == syscall.SIGKILL && p.cpuLimit > 0 && info.CPUTime >= p.cpuLimit)
	}
	return info
}

// cleanup removes what the sandbox leaves on the host: without namespaces,
// strays in its cgroups and its work directory; always, the cgroups.
func (p *Process) cleanup() {
	defer p.giveID()
	if p.cg != nil {
		if !p.layers.Namespaces {
			p.cg.killAll()
		}
		p.mu.Lock()
		slots := p.cgSlots
		p.mu.Unlock()
		release := p.cg.remove
		if slots != nil {
			release = func() error { return slots.put(p.cg) }
		}
		if err := release(); err != nil {
			p.logger.Warn("sandbox clean-up", "err", err)
		}
	}
	if p.workDir != "" {
		if err := os.RemoveAll(p.workDir); err != nil {
			p.logger.Warn("sandbox clean-up", "err", fmt.Errorf("remove work dir: %w", err))
		}
	}
}

// takeID gives the sandbox a host uid of its own.
func (p *Process) takeID() error {
	p.ids = currentIDs()
	id, err := p.ids.acquire()
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	p.hostID, p.layers.UID = id, id
	return nil
}

// giveID returns the sandbox's uid once nothing of the sandbox is left.
func (p *Process) giveID() {
	if p.hostID == 0 {
		return
	}
	id, ids := p.hostID, p.ids
	p.mu.Lock()
	after := p.idsAfter
	p.mu.Unlock()
	release := func() {
		if err := ids.release(id); err != nil {
			p.logger.Warn("sandbox clean-up", "err", err)
		}
	}
	if after == nil {
		release()
		return
	}
	go func() {
		<-after
		release()
	}()
}

func closeAll(files ...*os.File) {
	for _, f := range files {
		_ = f.Close() // pipe ends: nothing to flush
	}
}
