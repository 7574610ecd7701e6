package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/sys/unix"
)

// A Template is a warm interpreter that forks one sandboxed child per
// program instead of starting a fresh one (docs/sandbox.md, "The forking
// template"). The template itself runs in its own mount (the sandbox root,
// built once), PID, IPC, UTS and (unless the children have the network)
// network namespaces, as root with only CAP_SETUID and CAP_SETGID and a
// seccomp filter, and never runs untrusted code: it clones every child, as
// the child's own host uid (which so owns the child's user namespace),
// straight into new user, PID (the child is PID 1), mount, IPC, UTS, cgroup
// and (unless it has the network) network namespaces, writes its uid/gid
// maps (to that uid) and moves it into cgroups of its own (reused by a
// later child once verified empty, cgslots.go) before the child runs; the
// child mounts its own /proc, /tmp and /dev/shm, drops every capability and
// applies rlimits, no_new_privs, Landlock and the seccomp filter before it
// reads its first request.
//
// The child side is implemented by the interpreter (python/cyrnel/_template.py);
// this file starts the template and speaks its control protocol:
//
//   - host → template, once: templateConfig (JSON); template → host:
//     {"ready":true} or {"error":"…"}.
//   - host → template, per child: a forkRequest ({"cgroups":n,"extra":n,
//     "uid":n,"session":bool}) with the fds [status, fd 1, fd 2, extra
//     files…, cgroup.procs of each cgroup] (SCM_RIGHTS).
//   - on the status socket: {"pid":n} with a pidfd of the child (from the
//     template), {"started":true} or {"error":"…"} once it is locked down
//     (from the child), {"exit":{…}} when the template has reaped it; then
//     end-of-file.
type Template struct {
	layers  Layers
	limits  Limits
	support Support
	logger  *slog.Logger
	// cgroups are the children's cgroups, reused (cgslots.go).
	cgroups *cgroupSlots

	ctl  *net.UnixConn
	proc *os.Process
	done chan struct{}

	mu     sync.Mutex // serialises fork requests and guards closed
	closed bool
}

// TemplateSpec says how to start a template.
type TemplateSpec struct {
	// Argv is the template's argument vector; Argv[0] must be an absolute
	// path (the real executable).
	Argv []string
	// Env is added to the fixed base environment, as Spec.Env.
	Env []string
	// ReadPaths are made readable besides DefaultReadPaths.
	ReadPaths []string
	// Limits are each child's limits; zero fields take DefaultLimits.
	Limits Limits
	// Network lets children use the host's network.
	Network bool
	// Stderr receives what the template itself writes (warm-up errors);
	// nil discards it.
	Stderr io.Writer
	Logger *slog.Logger
}

// templateConfig is what the template needs to lock each child down.
type templateConfig struct {
	SandboxID int    `json:"sandboxId"` // uid and gid inside the user namespace
	Network   bool   `json:"network"`
	Limits    Limits `json:"limits"`
	// CPURlimit says no cgroup counts a child's CPU time: RLIMIT_CPU holds
	// every child then, a session's over its whole life (as a spawned
	// sandbox's); otherwise the CPU watch alone holds a session, per
	// execution (Process.ResetUsage).
	CPURlimit bool     `json:"cpuRlimit"`
	ReadPaths []string `json:"readPaths"`
	// Landlock masks for the kernel's ABI; ABI 0 skips Landlock.
	Landlock landlockMasks `json:"landlock"`
	// Seccomp are raw struct sock_filter arrays, installed in order.
	Seccomp [][]byte `json:"seccomp"`
	// TemplateSeccomp is the looser filter the template holds itself once
	// warm: the children's, minus what each child needs before its own
	// (templateAllowed).
	TemplateSeccomp [][]byte `json:"templateSeccomp"`
}

// templateAllowed are the denied system calls a child makes while it locks
// itself down, which the template's own filter (inherited by every child,
// filters stack) must therefore allow (unshare: its cgroup namespace, made
// once it is in its own cgroups); the template also clones with namespace
// flags.
var templateAllowed = []string{"unshare", "mount", "open_tree", "move_mount", "sethostname"}

type landlockMasks struct {
	ABI      int    `json:"abi"`
	FS       uint64 `json:"fs"`
	Net      uint64 `json:"net"`
	Scoped   uint64 `json:"scoped"`
	ReadDir  uint64 `json:"readDir"`
	ReadFile uint64 `json:"readFile"`
	RWDir    uint64 `json:"rwDir"`
	RWFile   uint64 `json:"rwFile"`
}

// templateSpec is what the host sends the template helper stage.
type templateSpec struct {
	ReadPaths []string `json:"readPaths"`
	Argv      []string `json:"argv"`
	Env       []string `json:"env"`
}

// TemplateUnavailable says why a template cannot hold programs as tightly
// as a spawned sandbox with relax would on this machine; "" when it can.
func TemplateUnavailable(relax Relax) string {
	if !hooked.Load() {
		return errNotHooked.Error()
	}
	sup := Probe()
	switch {
	case relax != Relax{Network: relax.Network}:
		return "a sandbox layer is turned off: the template implements only the full sandbox"
	case sup.Check(relax) != nil:
		return sup.Check(relax).Error()
	case os.Geteuid() != 0:
		return "the host does not run as root: the template cannot give each child its own unprivileged uid and cgroups"
	case !sup.Memory.OK() || !sup.Pids.OK():
		return "no memory and pids cgroups: a forked child's memory would be bounded only by rlimits the template's size distorts"
	case sup.LandlockABI == 0 || !sup.Seccomp:
		return "Landlock or seccomp unavailable"
	}
	return ""
}

// StartTemplate starts a template and returns once it is warm (or failed).
// ctx bounds the start only.
func StartTemplate(ctx context.Context, spec TemplateSpec) (*Template, error) {
	if why := TemplateUnavailable(Relax{Network: spec.Network}); why != "" {
		return nil, fmt.Errorf("sandbox: template unavailable: %s", why)
	}
	s := Spec{Argv: spec.Argv, Env: spec.Env, ReadPaths: spec.ReadPaths, Relax: Relax{Network: spec.Network}}
	readPaths, err := s.validate()
	if err != nil {
		return nil, err
	}
	sup := Probe()
	t := &Template{
		layers:  sup.Layers(Relax{Network: spec.Network}),
		limits:  spec.Limits.withDefaults(),
		support: sup,
		logger:  spec.Logger,
		done:    make(chan struct{}),
	}
	t.cgroups = newCgroupSlots(sup, t.limits)
	if t.logger == nil {
		t.logger = discardLogger
	}
	progs, err := seccompPrograms(spec.Network)
	if err != nil {
		return nil, err
	}
	looser := slices.DeleteFunc(slices.Clone(deniedSyscalls), func(n string) bool { return slices.Contains(templateAllowed, n) })
	tplProgs, err := seccompProgramsDenying(looser, false, spec.Network)
	if err != nil {
		return nil, err
	}
	cfg := templateConfig{
		SandboxID: sandboxID, Network: spec.Network, Limits: t.limits, CPURlimit: t.layers.CPU == KindRlimit, ReadPaths: readPaths,
		Landlock: landlockFor(sup.LandlockABI, spec.Network), Seccomp: progs, TemplateSeccomp: tplProgs,
	}
	env := environ(sandboxTmp, append([]string{
		// Preloaded libraries must not start threads in the template: a
		// forked child would inherit their locks but not the threads.
		"OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1",
		"NUMEXPR_NUM_THREADS=1", "VECLIB_MAXIMUM_THREADS=1",
	}, spec.Env...))
	ts, err := json.Marshal(templateSpec{ReadPaths: readPaths, Argv: spec.Argv, Env: env})
	if err != nil {
		return nil, fmt.Errorf("sandbox: encode template spec: %w", err)
	}
	hostEnd, childEnd, err := seqpacketPair()
	if err != nil {
		return nil, err
	}
	specR, specW, err := os.Pipe()
	if err != nil {
		closeAll(hostEnd, childEnd)
		return nil, fmt.Errorf("sandbox: template spec pipe: %w", err)
	}
	// Children with the network share the host's, and a clone keeps its
	// parent's: the template then stays in the host's too (it holds no
	// CAP_NET_*; decisions.md).
	flags := syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC
	if !spec.Network {
		flags |= syscall.CLONE_NEWNET
	}
	cmd := &exec.Cmd{
		Path:       helperExe(),
		Args:       []string{"cyrnel-sandbox-template", argTemplate},
		Env:        []string{},
		Dir:        "/",
		Stderr:     spec.Stderr,
		ExtraFiles: []*os.File{specR, childEnd},
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: uintptr(flags),
			Setpgid:    true,
			Pdeathsig:  syscall.SIGKILL,
		},
		WaitDelay: time.Second,
	}
	started := make(chan error, 1)
	go t.own(cmd, started)
	err = <-started
	closeAll(specR, childEnd)
	if err == nil {
		_, err = specW.Write(ts)
	}
	_ = specW.Close()
	if err != nil {
		_ = hostEnd.Close()
		t.Kill()
		return nil, fmt.Errorf("sandbox: start template: %w", err)
	}
	conn, err := net.FileConn(hostEnd)
	_ = hostEnd.Close() // FileConn holds its own copy
	if err != nil {
		t.Kill()
		return nil, fmt.Errorf("sandbox: template control socket: %w", err)
	}
	t.ctl = conn.(*net.UnixConn)
	if err := t.handshake(ctx, cfg); err != nil {
		t.Kill()
		return nil, err
	}
	return t, nil
}

// landlockFor is the best-effort Landlock configuration of the kernel's ABI,
// as the masks the template applies.
func landlockFor(abi int, network bool) landlockMasks {
	if abi == 0 {
		return landlockMasks{}
	}
	cfg := []landlock.Config{landlock.V1, landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5,
		landlock.V6, landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11}[min(abi, 11)]
	fs := uint64(cfg.HandledAccessFS)
	m := landlockMasks{ABI: abi, FS: fs, Scoped: uint64(cfg.Scoped)}
	if !network {
		m.Net = uint64(cfg.HandledAccessNet)
	}
	read := uint64(landlock.AccessFSSet(llExecute | llReadFile))
	m.ReadFile = read & fs
	m.ReadDir = (read | llReadDir) & fs
	m.RWFile = (read | llWriteFile | llTruncate | llIoctlDev) & fs
	m.RWDir = fs
	return m
}

// The file access rights (linux/landlock.h) that tell read from write.
const (
	llExecute   = 1 << 0
	llWriteFile = 1 << 1
	llReadFile  = 1 << 2
	llReadDir   = 1 << 3
	llTruncate  = 1 << 14
	llIoctlDev  = 1 << 15
)

func seqpacketPair() (host, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox: socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "child"), nil
}

// handshake sends the configuration and waits until the template is warm.
func (t *Template) handshake(ctx context.Context, cfg templateConfig) error {
	b, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("sandbox: encode template config: %w", err)
	}
	if _, err := t.ctl.Write(b); err != nil {
		return fmt.Errorf("sandbox: send template config: %w", err)
	}
	type answer struct {
		Ready bool   `json:"ready"`
		Error string `json:"error"`
	}
	got := make(chan answer, 1)
	go func() {
		buf := make([]byte, 64<<10)
		n, err := t.ctl.Read(buf)
		var a answer
		if err != nil || n == 0 {
			a.Error = "the template ended before it was warm"
		} else if err := json.Unmarshal(buf[:n], &a); err != nil {
			a.Error = fmt.Sprintf("unreadable answer %q", buf[:n])
		}
		got <- a
	}()
	select {
	case a := <-got:
		if !a.Ready {
			return fmt.Errorf("sandbox: template: %s", a.Error)
		}
		return nil
	case <-ctx.Done():
		t.Kill()
		<-got
		return fmt.Errorf("sandbox: template not warm: %w", ctx.Err())
	}
}

// own starts the template from a locked thread (Pdeathsig follows it) and
// reaps it.
func (t *Template) own(cmd *exec.Cmd, started chan<- error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(t.done)
	if err := cmd.Start(); err != nil {
		started <- err
		return
	}
	t.mu.Lock()
	t.proc = cmd.Process
	t.mu.Unlock()
	started <- nil
	_ = cmd.Wait() // how it ended matters not: its children are gone with it
	if err := t.cgroups.close(); err != nil {
		t.logger.Warn("sandbox template clean-up", "err", err)
	}
}

// Layers says which layers hold each child.
func (t *Template) Layers() Layers { return t.layers }

// Done is closed once the template has ended.
func (t *Template) Done() <-chan struct{} { return t.done }

// Pid is the host pid of the template process; 0 before it started.
func (t *Template) Pid() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.proc == nil {
		return 0
	}
	return t.proc.Pid
}

// Alive reports whether the template still forks: not killed, drained or
// ended.
func (t *Template) Alive() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	select {
	case <-t.done:
		return false
	default:
		return !t.closed
	}
}

// Kill ends the template and, with its PID namespace, every child.
func (t *Template) Kill() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if t.proc != nil {
		_ = t.proc.Kill() // already gone is fine
	}
}

// Drain stops forking: the template exits once its last child has ended.
func (t *Template) Drain() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if t.ctl != nil {
		_ = t.ctl.CloseWrite()
	}
}

// Fork starts one sandboxed child whose fds 1 and 2 are stdout and stderr
// and 3, 4, … the extra files, and returns once it is locked down and
// serving them. ctx bounds the start only.
func (t *Template) Fork(ctx context.Context, stdout, stderr *os.File, extra []*os.File) (*Process, error) {
	return t.fork(ctx, stdout, stderr, extra, false)
}

// ForkSession is Fork for a child that serves a session: its runtime keeps
// its state between executions (the fork request says so; nothing in the
// child's environment does). Long-lived, it is held to its CPU limit per
// execution by the CPU watch where a cgroup counts its time, not by an
// RLIMIT_CPU that would count its whole life.
func (t *Template) ForkSession(ctx context.Context, stdout, stderr *os.File, extra []*os.File) (*Process, error) {
	return t.fork(ctx, stdout, stderr, extra, true)
}

func (t *Template) fork(ctx context.Context, stdout, stderr *os.File, extra []*os.File, session bool) (*Process, error) {
	p := &Process{
		layers:   t.layers,
		cpuLimit: time.Duration(t.limits.CPUSeconds) * time.Second,
		cpuRate:  int64(runtime.NumCPU()) * 1000,
		logger:   t.logger,
		done:     make(chan struct{}),
		forked:   true,
		pidfd:    -1,
	}
	if p.layers.CPUQuota {
		p.cpuRate = min(p.cpuRate, t.limits.CPUMillicores)
	}
	// The child's own host uid: the template clones it with this
	// effective uid, so its user namespace belongs to it, and maps
	// sandboxID to it.
	if err := p.takeID(); err != nil {
		return nil, err
	}
	cg, err := t.cgroups.take()
	if err != nil {
		return nil, p.abort(fmt.Errorf("sandbox: %w", err))
	}
	p.cg, p.cgSlots = cg, t.cgroups
	procs := cg.procs
	hostEnd, childEnd, err := seqpacketPair()
	if err != nil {
		return nil, p.abort(err)
	}
	files := append(append([]*os.File{childEnd, stdout, stderr}, extra...), procs...)
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	msg, _ := json.Marshal(forkRequest{Cgroups: len(procs), Extra: len(extra), UID: p.hostID, Session: session}) // plain data
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		closeAll(hostEnd, childEnd)
		return nil, p.abort(errors.New("sandbox: template is closed"))
	}
	_, _, err = t.ctl.WriteMsgUnix(msg, unix.UnixRights(fds...), nil)
	if err != nil && t.proc != nil {
		// A template that cannot take requests is gone or broken.
		t.closed = true
		_ = t.proc.Kill()
	}
	t.mu.Unlock()
	_ = childEnd.Close() // in flight: the template holds it now
	if err != nil {
		_ = hostEnd.Close()
		return nil, p.abort(fmt.Errorf("sandbox: fork request: %w", err))
	}
	conn, err := net.FileConn(hostEnd)
	_ = hostEnd.Close()
	if err != nil {
		p.cgSlots = nil // the template has the request: a child may join them yet
		return nil, p.abort(fmt.Errorf("sandbox: status socket: %w", err))
	}
	started := make(chan error, 1)
	go p.ownForked(conn.(*net.UnixConn), started)
	select {
	case err := <-started:
		if err != nil {
			return nil, err
		}
		if p.layers.CPU != KindRlimit {
			go p.watchCPU()
		}
		return p, nil
	case <-ctx.Done():
		_ = p.Kill()
		// A hung template never closes its end: closing ours ends the
		// owner's wait; a child forked later finds nobody to report to,
		// and Kill reached it once its pidfd arrived, if ever. Its uid
		// stays taken until the template (and so the child) is gone.
		// Its cgroups are not reused either: the template may still move
		// a child into them.
		p.mu.Lock()
		p.idsAfter, p.cgSlots = t.done, nil
		p.mu.Unlock()
		_ = conn.Close()
		<-p.done
		return nil, fmt.Errorf("sandbox: fork: %w", ctx.Err())
	}
}

// forkRequest asks the template for one child; the files travel beside it
// (SCM_RIGHTS): the status socket, fds 1 and 2, Extra files, then Cgroups
// cgroup.procs files.
type forkRequest struct {
	Cgroups int  `json:"cgroups"`
	Extra   int  `json:"extra"`
	UID     int  `json:"uid"`     // the child's host uid
	Session bool `json:"session"` // the child's runtime serves a session
}

// forkReport is one message of a forked child's status socket.
type forkReport struct {
	report
	Pid int `json:"pid"`
}

// ownForked follows one forked child through its status socket, which
// reaches end-of-file once the template has reaped and reported it, then
// cleans up.
func (p *Process) ownForked(conn *net.UnixConn, started chan<- error) {
	defer close(p.done)
	defer conn.Close()
	buf := make([]byte, 4096)
	oob := make([]byte, unix.CmsgSpace(4))
	var exit *exitReport
	var startErr error
	reported := false
	tell := func(err error) {
		if !reported {
			reported = true
			started <- err
		}
	}
	for {
		n, oobn, _, _, err := conn.ReadMsgUnix(buf, oob)
		if err != nil || n == 0 {
			break
		}
		var r forkReport
		if err := json.Unmarshal(buf[:n], &r); err != nil {
			startErr = fmt.Errorf("sandbox: unreadable report %q", buf[:n])
			break
		}
		if r.Pid != 0 {
			p.adoptPidfd(oob[:oobn])
		}
		switch {
		case r.Error != "":
			startErr = errors.New(r.Error)
			_ = p.Kill()
		case r.Started:
			tell(nil)
		case r.Exit != nil:
			exit = r.Exit
		}
	}
	p.mu.Lock()
	p.reaped = true
	if p.pidfd >= 0 {
		_ = unix.Close(p.pidfd)
		p.pidfd = -1
	}
	p.mu.Unlock()
	if !reported && startErr == nil {
		startErr = fmt.Errorf("sandbox: the forked child ended before it was locked down (%+v)", exit)
	}
	tell(startErr)
	p.exit = p.forkedExit(exit)
	p.mu.Lock()
	p.final, p.ended = p.usageLocked(), true
	p.mu.Unlock()
	p.cleanup()
}

// forkedExit says how a forked child ended: as the template reported, with
// the cgroups' counters; without a report (the template died), only Kill
// or the memory limit explain it.
func (p *Process) forkedExit(r *exitReport) ExitInfo {
	info := ExitInfo{Code: -1, MemoryLimit: p.cg.oomKilled(), ProcLimit: p.cg.forkRefused()}
	p.mu.Lock()
	killed, cpuOver := p.killed, p.cpuOver
	p.mu.Unlock()
	if r != nil {
		info.Code = r.Code
		info.Signal = syscall.Signal(r.Signal)
		info.CPUTime = time.Duration(r.CPUNanos)
		info.MaxRSS = r.MaxRSSKiB << 10
		info.Killed = killed && info.Signal == syscall.SIGKILL
	} else {
		info.Killed = killed
		if !killed && !info.MemoryLimit && !cpuOver {
			info.Err = errors.New("sandbox: forked child ended without a report")
		}
	}
	// The CPU watch (a CPU cgroup) or the child's own RLIMIT_CPU.
	info.CPULimit = cpuOver || info.Signal == syscall.SIGXCPU ||
		(info.Signal == syscall.SIGKILL && p.cpuLimit > 0 && info.CPUTime >= p.cpuLimit)
	return info
}

// adoptPidfd keeps the pidfd of the forked program, through which Kill
// reaches it without racing pid reuse; a Kill that came first is carried
// out now.
func (p *Process) adoptPidfd(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil || len(msgs) != 1 {
		return
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pidfd = fds[0]
	if p.killed {
		_ = unix.PidfdSendSignal(p.pidfd, unix.SIGKILL, nil, 0)
	}
}

// templateTmpBytes bounds the template's own /tmp: what preloads cache there
// (matplotlib's font list is ~50 KiB) and the mount points of read paths.
const templateTmpBytes = 16 << 20

// runTemplate is the template helper stage: PID 1 of the template's
// namespaces, it builds the sandbox root once, keeps only the capabilities
// the template needs to hand each child its uid, and execs the template.
func runTemplate() int {
	specFile := os.NewFile(3, "spec")
	var s templateSpec
	err := json.NewDecoder(specFile).Decode(&s)
	_ = specFile.Close()
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "sandbox template: %v\n", err)
		return 125
	}
	if err != nil {
		return fail(fmt.Errorf("read spec: %w", err))
	}
	// /proc stays the template's own: a child may mount its own /proc only
	// where one is fully visible. /tmp is the template's; each child mounts
	// its own over it.
	if _, err := buildRoot(s.ReadPaths, templateTmpBytes); err != nil {
		return fail(err)
	}
	// Children (their own uids) reach the read paths mirrored below the
	// template's /tmp through it; they list nothing there. The template
	// owns it: preloads that want a temporary, config or cache directory
	// (matplotlib's font list) write there, under the same paths a child
	// then finds in its own /tmp.
	if err := os.Chown(sandboxTmp, os.Getuid(), os.Getgid()); err != nil {
		return fail(fmt.Errorf("chown %s: %w", sandboxTmp, err))
	}
	if err := os.Chmod(sandboxTmp, 0o711); err != nil {
		return fail(fmt.Errorf("chmod %s: %w", sandboxTmp, err))
	}
	// Writable, for each child to write its own uid and gid maps.
	if err := unix.Mount("proc", "/proc", "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fail(fmt.Errorf("make /proc writable: %w", err))
	}
	// The control socket becomes fd 3; nothing else passes.
	if err := unix.Dup3(4, 3, 0); err != nil {
		return fail(fmt.Errorf("dup control socket: %w", err))
	}
	if err := unix.CloseRange(4, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fail(fmt.Errorf("close_range: %w", err))
	}
	keep := map[int]bool{unix.CAP_SETUID: true, unix.CAP_SETGID: true}
	for c := range 64 {
		if keep[c] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) {
				break
			}
			return fail(fmt.Errorf("drop bounding capability %d: %w", c, err))
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("no_new_privs: %w", err))
	}
	err = syscall.Exec(s.Argv[0], s.Argv, s.Env)
	return fail(fmt.Errorf("exec %s: %s: %w", s.Argv[0], strings.Join(s.Argv[1:2], " "), err))
}
