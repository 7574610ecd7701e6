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

	"golang.org/x/sys/unix"
)

// The helper stages are selected by os.Args[1]. The names are unlikely to
// collide with any command of the binary that embeds this package.
const (
	argInit = "__cyrnel_sandbox_init"
	argExec = "__cyrnel_sandbox_exec"
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
	Exec       execSpec `json:"exec"`
}

// report is one line the init writes to the host.
type report struct {
	// Started: the program runs (or, probing, the root is built).
	Started bool        `json:"started,omitempty"`
	Error   string      `json:"error,omitempty"`
	Exit    *exitReport `json:"exit,omitempty"`
}

// exitReport says how the program (the init's child) ended.
type exitReport struct {
	Code      int   `json:"code"`
	Signal    int   `json:"signal"`
	CPUNanos  int64 `json:"cpuNanos"`
	MaxRSSKiB int64 `json:"maxRssKiB"`
}

// IsHelper reports whether args (normally os.Args) start a sandbox helper
// stage, that is whether MaybeRun would take over the process.
func IsHelper(args []string) bool {
	return len(args) > 1 && (args[1] == argInit || args[1] == argExec)
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
	if os.Args[1] == argInit {
		os.Exit(runInit())
	}
	os.Exit(runExec(os.Args[2:]))
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
	if s.Namespaces {
		if err := buildRoot(s.ReadPaths, s.TmpBytes); err != nil {
			return fail(fmt.Errorf("sandbox init: %w", err))
		}
	} else if err := unix.Chdir(s.WorkDir); err != nil {
		return fail(fmt.Errorf("sandbox init: chdir work dir: %w", err))
	}
	if s.ProbeOnly {
		send(report{Started: true})
		return 0
	}
	pid, err := startExec(s)
	if err != nil {
		return fail(fmt.Errorf("sandbox: %w", err))
	}
	send(report{Started: true})
	return supervise(pid, s.Namespaces, send)
}

// startExec starts the exec stage with fds 0-2 and the caller's extra files,
// and waits until it has exec'd the program or failed to.
func startExec(s initSpec) (int, error) {
	// Nothing of the init's may leak into the program: every fd from 3 up
	// closes on exec; ForkExec dups in the ones that must pass.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return 0, fmt.Errorf("close_range: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return 0, fmt.Errorf("exec error pipe: %w", err)
	}
	defer errR.Close()
	files := []uintptr{0, 1, 2}
	for i := range s.ExtraFiles {
		files = append(files, uintptr(initExtraFD+i))
	}
	files = append(files, errW.Fd())
	spec, err := json.Marshal(s.Exec)
	if err != nil {
		return 0, fmt.Errorf("encode exec spec: %w", err)
	}
	if s.Namespaces {
		if err := dropInheritedCaps(); err != nil {
			return 0, err
		}
	}
	argv := []string{"cyrnel-sandbox-exec", argExec, strconv.Itoa(s.ExtraFiles), string(spec)}
	pid, err := syscall.ForkExec(selfExe, argv, &syscall.ProcAttr{
		Env:   []string{},
		Files: files,
		Sys: &syscall.SysProcAttr{
			// Its own group inside the namespace, so signals forwarded
			// to the group reach the program's children too.
			Setpgid: s.Namespaces,
			// Without a PID namespace nothing else ends the program
			// when the init dies; this thread lives as long as the init.
			Pdeathsig: syscall.SIGKILL,
		},
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
	// Let the host see EOF on the program's pipes once the program and its
	// children are done with them: the init keeps no copy.
	for i := range s.ExtraFiles {
		_ = unix.Close(initExtraFD + i)
	}
	devNull, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return pid, fmt.Errorf("open /dev/null: %w", err)
	}
	for fd := range 3 {
		if err := unix.Dup3(devNull, fd, 0); err != nil {
			return pid, fmt.Errorf("dup /dev/null: %w", err)
		}
	}
	_ = unix.Close(devNull)
	return pid, nil
}

// dropInheritedCaps clears this thread's ambient and inheritable
// capabilities (the init got CAP_SYS_ADMIN to mount), so the exec stage, an
// unprivileged uid, starts with none at all.
func dropInheritedCaps() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// supervise forwards signals to the program, reaps every child (orphans of
// the namespace are reparented to the init) and, when the program ends,
// reports how and returns: the kernel then kills what is left in the PID
// namespace.
func supervise(pid int, group bool, send func(report)) int {
	target := pid
	if group {
		target = -pid
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2)
	go func() {
		for sig := range sigs {
			_ = unix.Kill(target, sig.(syscall.Signal)) // gone already: nothing to forward to
		}
	}()
	for {
		var ws unix.WaitStatus
		var ru unix.Rusage
		wpid, err := unix.Wait4(-1, &ws, 0, &ru)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			send(report{Error: fmt.Sprintf("sandbox init: wait: %v", err)})
			return 125
		}
		if wpid != pid {
			continue // a reaped orphan
		}
		r := exitReport{
			Code:      -1,
			CPUNanos:  ru.Utime.Nano() + ru.Stime.Nano(),
			MaxRSSKiB: ru.Maxrss,
		}
		code := 0
		switch {
		case ws.Exited():
			r.Code = ws.ExitStatus()
			code = r.Code
		case ws.Signaled():
			r.Signal = int(ws.Signal())
			code = 128 + r.Signal
		}
		send(report{Exit: &r})
		return code
	}
}

// runExec is the second stage: it locks itself down and becomes the program.
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
	if err := restrict(s, 3+extra); err != nil {
		return fail(fmt.Errorf("restrict: %w", err))
	}
	err = syscall.Exec(s.Argv[0], s.Argv, s.Env)
	return fail(fmt.Errorf("exec %s: %w", s.Argv[0], err))
}
