package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

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
