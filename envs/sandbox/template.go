package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
	"golang.org/x/sys/unix"

	"github.com/cyrnel/cyrnel/envs/affinity"
)

// A Template is a warm interpreter that forks sandboxed children instead
// of starting fresh interpreters (docs/sandbox.md, "The forking
// template"): keepers, each of which forks one program at a time from
// itself (keeper.go), and sessions' interpreters. The template itself runs
// in its own mount (the sandbox root,
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
// template*.go start the template and speak its control protocol:
//
//   - host → template, once: templateConfig (JSON); template → host:
//     {"ready":true} or {"error":"…"}.
//   - host → template, per child: a forkRequest ({"cgroups":n,"extra":n,
//     "uid":n,"session":bool}: a session's child, otherwise a keeper) with
//     the fds [status, fd 1, fd 2, extra files…, cgroup.procs of each
//     cgroup] (SCM_RIGHTS).
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

	mu     sync.Mutex // serialises fork requests and guards closed and idle
	closed bool
	idle   []*keeper // keepers between programs (keeper.go)
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
	// Keepers is how many keepers StartTemplate forks before it returns,
	// idle for the first programs (at most maxIdleKeepers).
	Keepers int
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
	cfg, err := t.config(spec.Network, readPaths)
	if err != nil {
		return nil, err
	}
	if err := t.launch(spec, readPaths); err != nil {
		return nil, err
	}
	if err := t.handshake(ctx, cfg); err != nil {
		t.Kill()
		return nil, err
	}
	t.adviseFolios()
	t.forkKeepers(ctx, min(spec.Keepers, maxIdleKeepers))
	return t, nil
}

// config is what the template needs to lock each child down: the
// children's seccomp filters, the template's own looser one, and Landlock.
func (t *Template) config(network bool, readPaths []string) (templateConfig, error) {
	progs, err := seccompPrograms(network)
	if err != nil {
		return templateConfig{}, err
	}
	looser := slices.DeleteFunc(slices.Clone(deniedSyscalls), func(n string) bool { return slices.Contains(templateAllowed, n) })
	tplProgs, err := seccompProgramsDenying(looser, false, network)
	if err != nil {
		return templateConfig{}, err
	}
	return templateConfig{
		SandboxID: sandboxID, Network: network, Limits: t.limits, CPURlimit: t.layers.CPU == KindRlimit, ReadPaths: readPaths,
		Landlock: landlockFor(t.support.LandlockABI, network), Seccomp: progs, TemplateSeccomp: tplProgs,
	}, nil
}

// launch starts the template helper stage, sends it its spec and keeps the
// control socket; on failure nothing of the template is left running.
func (t *Template) launch(spec TemplateSpec, readPaths []string) error {
	env := environ(sandboxTmp, append([]string{
		// Preloaded libraries must not start threads in the template: a
		// forked child would inherit their locks but not the threads.
		"OPENBLAS_NUM_THREADS=1", "OMP_NUM_THREADS=1", "MKL_NUM_THREADS=1",
		"NUMEXPR_NUM_THREADS=1", "VECLIB_MAXIMUM_THREADS=1",
	}, spec.Env...))
	ts, err := json.Marshal(templateSpec{ReadPaths: readPaths, Argv: spec.Argv, Env: env})
	if err != nil {
		return fmt.Errorf("sandbox: encode template spec: %w", err)
	}
	hostEnd, childEnd, err := seqpacketPair()
	if err != nil {
		return err
	}
	specR, specW, err := os.Pipe()
	if err != nil {
		closeAll(hostEnd, childEnd)
		return fmt.Errorf("sandbox: template spec pipe: %w", err)
	}
	started := make(chan error, 1)
	go t.own(templateCmd(spec, specR, childEnd), started)
	err = <-started
	closeAll(specR, childEnd)
	if err == nil {
		_, err = specW.Write(ts)
	}
	_ = specW.Close()
	if err != nil {
		_ = hostEnd.Close()
		t.Kill()
		return fmt.Errorf("sandbox: start template: %w", err)
	}
	conn, err := net.FileConn(hostEnd)
	_ = hostEnd.Close() // FileConn holds its own copy
	if err != nil {
		t.Kill()
		return fmt.Errorf("sandbox: template control socket: %w", err)
	}
	t.ctl = conn.(*net.UnixConn)
	return nil
}

// templateCmd is the command of the template helper stage, which reads its
// spec from specR and gets the control socket's child end.
func templateCmd(spec TemplateSpec, specR, childEnd *os.File) *exec.Cmd {
	// Children with the network share the host's, and a clone keeps its
	// parent's: the template then stays in the host's too (it holds no
	// CAP_NET_*; decisions.md).
	flags := syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWUTS | syscall.CLONE_NEWIPC
	if !spec.Network {
		flags |= syscall.CLONE_NEWNET
	}
	return &exec.Cmd{
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
	if err := affinity.Process.Spawn(cmd.Start); err != nil {
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
	t.closed = true
	if t.proc != nil {
		_ = t.proc.Kill() // already gone is fine
	}
	t.mu.Unlock()
	t.retireIdle()
}

// Drain stops forking: the idle keepers retire, a busy one once its
// program has ended, and the template exits once its last child has ended.
func (t *Template) Drain() {
	t.mu.Lock()
	t.closed = true
	if t.ctl != nil {
		_ = t.ctl.CloseWrite()
	}
	t.mu.Unlock()
	t.retireIdle()
}
