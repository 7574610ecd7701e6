package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// The helper stages are selected by os.Args[1]. The names are unlikely to
// collide with any command of the binary that embeds this package.
const (
	argInit = "__cyrnel_sandbox_init"
	argExec = "__cyrnel_sandbox_exec"
	// argTemplate starts a forking template (template.go).
	argTemplate = "__cyrnel_sandbox_template"
	// selfExe re-executes the running binary even if its file was replaced
	// or deleted since it started.
	selfExe = "/proc/self/exe"
)

// The init's file descriptors, as the host passes them.
const (
	initSpecFD   = 3 // initSpec, JSON, closed by the host after writing
	initStatusFD = 4 // reports, JSON lines, to the host
	initExtraFD  = 5 // first of the caller's extra files
)

// initSpec is what the host sends the init.
type initSpec struct {
	// Namespaces says the init runs in fresh namespaces and must build the
	// sandbox root and be the PID namespace's init.
	Namespaces bool `json:"namespaces"`
	// ProbeOnly stops after the root is built: Probe's test run.
	ProbeOnly  bool     `json:"probeOnly,omitempty"`
	ReadPaths  []string `json:"readPaths"`
	TmpBytes   int64    `json:"tmpBytes"`
	ExtraFiles int      `json:"extraFiles"`
	WorkDir    string   `json:"workDir"`
	// ExecStage says the program needs RLIMIT_NPROC or RLIMIT_DATA (no
	// cgroup holds its processes or memory). The init cannot take those
	// limits itself (it must stay able to make threads, and its own Go
	// runtime's memory would count against the program's limit, all of it
	// with a small limit), so a second stage sets them and execs the
	// program. Otherwise the init restricts itself and starts the program
	// directly, saving a Go start.
	ExecStage bool     `json:"execStage"`
	Exec      execSpec `json:"exec"`
	// CgroupNS: unshare the cgroup namespace first (the host has moved
	// the init into the sandbox's cgroups before sending the spec).
	CgroupNS bool `json:"cgroupNs,omitempty"`
	// DropToSandboxID: the init runs as uid 0 of the namespace (the host's
	// root) and switches to sandboxID once the root is built.
	DropToSandboxID bool `json:"dropToSandboxId,omitempty"`
}

// report is one line the init writes to the host.
type report struct {
	// Started: the program runs (or, probing, the root is built).
	Started bool `json:"started,omitempty"`
	// ProcSubset: /proc was mounted with subset=pid (see mountProc).
	ProcSubset bool        `json:"procSubset,omitempty"`
	Error      string      `json:"error,omitempty"`
	Exit       *exitReport `json:"exit,omitempty"`
}

// exitReport says how the program (the init's child) ended.
type exitReport struct {
	Code      int   `json:"code"`
	Signal    int   `json:"signal"`
	CPUNanos  int64 `json:"cpuNanos"`
	MaxRSSKiB int64 `json:"maxRssKiB"`
	// Spent: the keeper that ran the program could not clean up after it
	// and retires (keeper.go).
	Spent bool `json:"spent,omitempty"`
}

// IsHelper reports whether args (normally os.Args) start a sandbox helper
// stage, that is whether MaybeRun would take over the process.
func IsHelper(args []string) bool {
	return len(args) > 1 && (args[1] == argInit || args[1] == argExec || args[1] == argTemplate)
}

// MaybeRun runs the sandbox helper stage os.Args names and exits; it
// returns at once, doing nothing, when this process is not a helper. Call
// it first thing in main (and in TestMain of tests that start sandboxes).
func MaybeRun() {
	if !IsHelper(os.Args) {
		hooked.Store(true)
		return
	}
	// Per-thread state (capabilities, the parent-death signal of the
	// children) must live on the thread that forks and execs.
	runtime.LockOSThread()
	// syscall.Exit, not os.Exit: a helper has nothing to finalise, and
	// exit hooks of instrumented builds (the race detector sleeps a second
	// at exit) would delay the sandbox's end.
	switch os.Args[1] {
	case argInit:
		syscall.Exit(runInit())
	case argTemplate:
		syscall.Exit(runTemplate())
	}
	syscall.Exit(runExec(os.Args[2:]))
}

// runInit is the first stage: PID 1 of the sandbox.
func runInit() int {
	status := os.NewFile(initStatusFD, "status")
	send := func(r report) {
		b, _ := json.Marshal(r) // plain data, cannot fail
		// Nothing to do if the host is gone: Pdeathsig ends us anyway.
		_, _ = status.Write(append(b, '\n'))
	}
	fail := func(err error) int {
		send(report{Error: err.Error()})
		return 125
	}
	specFile := os.NewFile(initSpecFD, "spec")
	var s initSpec
	err := json.NewDecoder(specFile).Decode(&s)
	_ = specFile.Close() // read-only pipe end
	if err != nil {
		return fail(fmt.Errorf("sandbox init: read spec: %w", err))
	}
	if s.CgroupNS {
		if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
			return fail(fmt.Errorf("sandbox init: unshare cgroup namespace: %w", err))
		}
	}
	var procSubset bool
	if s.Namespaces {
		if procSubset, err = buildRoot(s.ReadPaths, s.TmpBytes); err != nil {
			return fail(fmt.Errorf("sandbox init: %w", err))
		}
	} else if err := unix.Chdir(s.WorkDir); err != nil {
		return fail(fmt.Errorf("sandbox init: chdir work dir: %w", err))
	}
	if s.DropToSandboxID {
		if err := dropToSandboxID(status); err != nil {
			return fail(fmt.Errorf("sandbox init: %w", err))
		}
	}
	if s.ProbeOnly {
		send(report{Started: true, ProcSubset: procSubset})
		return 0
	}
	// Signals are caught before the program starts: one the host sends as
	// soon as the program runs is forwarded, not taken by the init's
	// default handling.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	pid, err := startProgram(s)
	if err != nil {
		return fail(fmt.Errorf("sandbox: %w", err))
	}
	send(report{Started: true, ProcSubset: procSubset})
	return supervise(pid, s.Namespaces, sigs, send)
}

// startProgram starts the program with fds 0-2 and the caller's extra
// files, restricted, and returns once it has been exec'd.
func startProgram(s initSpec) (int, error) {
	// Nothing of the init's may leak into the program: every fd from 3 up
	// closes on exec; ForkExec dups in the ones that must pass.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return 0, fmt.Errorf("close_range: %w", err)
	}
	// Opened now: Landlock may not allow it once the init is restricted.
	devNull, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open /dev/null: %w", err)
	}
	defer unix.Close(devNull)
	files := []uintptr{0, 1, 2}
	for i := range s.ExtraFiles {
		files = append(files, uintptr(initExtraFD+i))
	}
	if err := dropPrivileges(); err != nil {
		return 0, err
	}
	sys := &syscall.SysProcAttr{
		// Its own group inside the namespace, so signals forwarded to
		// the group reach the program's children too.
		Setpgid: s.Namespaces,
		// Without a PID namespace nothing else ends the program when
		// the init dies; this thread lives as long as the init.
		Pdeathsig: syscall.SIGKILL,
	}
	var pid int
	if s.ExecStage {
		pid, err = startExecStage(s, files, sys)
	} else {
		// Everything but RLIMIT_NPROC and RLIMIT_DATA can hold the init
		// too, and the program inherits it across fork and exec.
		if err := restrict(s.Exec, false); err != nil {
			return 0, fmt.Errorf("restrict: %w", err)
		}
		pid, err = syscall.ForkExec(s.Exec.Argv[0], s.Exec.Argv, &syscall.ProcAttr{Env: s.Exec.Env, Files: files, Sys: sys})
		if err != nil {
			err = fmt.Errorf("exec %s: %w", s.Exec.Argv[0], err)
		}
	}
	if err != nil {
		return 0, err
	}
	// Let the host see EOF on the program's pipes once the program and its
	// children are done with them: the init keeps no copy.
	for i := range s.ExtraFiles {
		_ = unix.Close(initExtraFD + i)
	}
	for fd := range 3 {
		if err := unix.Dup3(devNull, fd, 0); err != nil {
			return pid, fmt.Errorf("dup /dev/null: %w", err)
		}
	}
	return pid, nil
}

// startExecStage starts the exec stage, which restricts itself and execs
// the program, and waits until it has done so or failed; the error comes
// through a pipe passed after the extra files.
func startExecStage(s initSpec, files []uintptr, sys *syscall.SysProcAttr) (int, error) {
	errR, errW, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("exec error pipe: %w", err)
	}
	defer errR.Close()
	spec, err := json.Marshal(s.Exec)
	if err != nil {
		_ = errW.Close()
		return 0, fmt.Errorf("encode exec spec: %w", err)
	}
	argv := []string{"cyrnel-sandbox-exec", argExec, strconv.Itoa(s.ExtraFiles), string(spec)}
	pid, err := syscall.ForkExec(selfExe, argv, &syscall.ProcAttr{
		Env:   []string{},
		Files: append(files, errW.Fd()),
		Sys:   sys,
	})
	_ = errW.Close() // the child has its copy; EOF below means exec succeeded
	if err != nil {
		return 0, fmt.Errorf("start exec stage: %w", err)
	}
	msg, _ := io.ReadAll(errR)
	if len(msg) > 0 {
		var ws unix.WaitStatus
		_, _ = unix.Wait4(pid, &ws, 0, nil) // reap the failed stage
		return 0, errors.New(string(msg))
	}
	return pid, nil
}

// dropToSandboxID switches every thread of the init to sandboxID, which a
// root host maps to the sandbox's own uid: from here on neither the init
// nor the program can open what only the host's root may. Leaving uid 0
// also clears every capability (no SECBIT_KEEP_CAPS) and the parent-death
// signal, which is set again; a host that died in between is seen on the
// status pipe.
func dropToSandboxID(status *os.File) error {
	if err := syscall.Setgroups(nil); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	// syscall's set*id apply to every thread of the process.
	if err := syscall.Setresgid(sandboxID, sandboxID, sandboxID); err != nil {
		return fmt.Errorf("setresgid: %w", err)
	}
	if err := syscall.Setresuid(sandboxID, sandboxID, sandboxID); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	// The kernel signals a process if any of its threads asked to be.
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return fmt.Errorf("parent-death signal: %w", err)
	}
	// The write end of a pipe polls POLLERR once no reader is left.
	fds := []unix.PollFd{{Fd: int32(status.Fd()), Events: unix.POLLOUT}}
	if _, err := unix.Poll(fds, 0); err != nil {
		return fmt.Errorf("poll status pipe: %w", err)
	}
	if fds[0].Revents&unix.POLLERR != 0 {
		return errors.New("the host is gone")
	}
	return nil
}

// Securebits (linux/securebits.h): make uid 0 an ordinary uid, for good.
const (
	secbitNoRoot                  = 1 << 0
	secbitNoRootLocked            = 1 << 1
	secbitNoSetuidFixup           = 1 << 2
	secbitNoSetuidFixupLocked     = 1 << 3
	secbitNoCapAmbientRaise       = 1 << 6
	secbitNoCapAmbientRaiseLocked = 1 << 7
)

// dropPrivileges leaves every thread of the init, and whatever it starts,
// without capabilities and not dumpable. In namespaces the init held
// CAP_SYS_ADMIN only to build the root. Without them a root host's init is
// root, and its program would regain every capability at exec: the
// bounding set is emptied and uid 0 stripped of its meaning first.
func dropPrivileges() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	// Capabilities are per thread: psx runs each call on all of them.
	if data[0].Effective&(1<<unix.CAP_SETPCAP) != 0 {
		for c := range 64 {
			_, _, errno := psx.Syscall3(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0)
			if errno == unix.EINVAL {
				break // past the kernel's last capability
			}
			if errno != 0 {
				return fmt.Errorf("drop bounding capability %d: %w", c, errno)
			}
		}
		bits := secbitNoRoot | secbitNoRootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLocked |
			secbitNoCapAmbientRaise | secbitNoCapAmbientRaiseLocked
		if _, _, errno := psx.Syscall3(unix.SYS_PRCTL, unix.PR_SET_SECUREBITS, uintptr(bits), 0); errno != 0 {
			return fmt.Errorf("securebits: %w", errno)
		}
	}
	none := [2]unix.CapUserData{}
	if _, _, errno := psx.Syscall3(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&none[0])), 0); errno != 0 {
		return fmt.Errorf("capset: %w", errno)
	}
	// Not dumpable: the program, same uid, cannot read the init's memory
	// or attach to it even with ptrace allowed.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("dumpable: %w", err)
	}
	return nil
}

// supervise forwards signals to the program, reaps every child (orphans of
// the namespace are reparented to the init) and, when the program ends,
// reports how and returns: the kernel then kills what is left in the PID
// namespace.
//
// Signals are sent from this goroutine, locked to the thread that forked
// the program: before Landlock ABI 8 each thread of the init enforces its
// own Landlock domain, and only the forking thread's domain is the
// program's, which scoped signalling requires.
func supervise(pid int, group bool, sigs <-chan os.Signal, send func(report)) int {
	target := pid
	if group {
		target = -pid
	}
	type waited struct {
		pid int
		ws  unix.WaitStatus
		ru  unix.Rusage
		err error
	}
	exits := make(chan waited)
	go func() {
		for {
			var w waited
			w.pid, w.err = unix.Wait4(-1, &w.ws, 0, &w.ru)
			if errors.Is(w.err, unix.EINTR) {
				continue
			}
			exits <- w
			if w.err != nil || w.pid == pid {
				return
			}
		}
	}()
	for {
		var w waited
		select {
		case sig := <-sigs:
			_ = unix.Kill(target, sig.(syscall.Signal)) // gone already: nothing to forward to
			continue
		case w = <-exits:
		}
		if w.err != nil {
			send(report{Error: fmt.Sprintf("sandbox init: wait: %v", w.err)})
			return 125
		}
		if w.pid != pid {
			continue // a reaped orphan
		}
		r := exitReport{
			Code:      -1,
			CPUNanos:  w.ru.Utime.Nano() + w.ru.Stime.Nano(),
			MaxRSSKiB: w.ru.Maxrss,
		}
		code := 0
		switch {
		case w.ws.Exited():
			r.Code = w.ws.ExitStatus()
			code = r.Code
		case w.ws.Signaled():
			r.Signal = int(w.ws.Signal())
			code = 128 + r.Signal
		}
		send(report{Exit: &r})
		return code
	}
}

// runExec is the exec stage: it locks itself down and becomes the program.
// Its arguments are the number of extra files and the execSpec; errors go to
// the pipe the init passed after the extra files.
func runExec(args []string) int {
	if len(args) != 2 {
		return 127
	}
	extra, err := strconv.Atoi(args[0])
	if err != nil {
		return 127
	}
	errPipe := os.NewFile(uintptr(3+extra), "exec-error")
	fail := func(err error) int {
		_, _ = fmt.Fprint(errPipe, err.Error()) // the init reads it; nothing else to tell
		return 127
	}
	var s execSpec
	if err := json.Unmarshal([]byte(args[1]), &s); err != nil {
		return fail(fmt.Errorf("exec stage: decode spec: %w", err))
	}
	// Only fds 0-2 and the caller's extra files may reach the program.
	if err := unix.CloseRange(uint(3+extra), ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fail(fmt.Errorf("close_range: %w", err))
	}
	if err := restrict(s, true); err != nil {
		return fail(fmt.Errorf("restrict: %w", err))
	}
	err = syscall.Exec(s.Argv[0], s.Argv, s.Env)
	return fail(fmt.Errorf("exec %s: %w", s.Argv[0], err))
}
