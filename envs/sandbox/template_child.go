package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

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
	keeps := p.keeps
	p.mu.Unlock()
	if keeps != nil {
		<-keeps.free // a keeper's program shares its cgroups: it has ended now
	}
	if !reported && startErr == nil {
		startErr = fmt.Errorf("sandbox: the forked child ended before it was locked down (%+v)", exit)
	}
	tell(startErr)
	p.keeperClean = exit != nil && !exit.Spent
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
