package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

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
