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

// Fork starts one sandboxed program whose fds 1 and 2 are stdout and
// stderr and 3, 4, … the extra files, and returns once it runs, locked
// down, and serves them. A keeper forks it (keeper.go): an idle one, or
// one the template forks for it. ctx bounds the start only.
func (t *Template) Fork(ctx context.Context, stdout, stderr *os.File, extra []*os.File) (*Process, error) {
	for {
		k, fresh, err := t.keeper(ctx)
		if err != nil {
			return nil, err
		}
		p, err := k.run(ctx, stdout, stderr, extra)
		// An idle keeper (forked ahead, or back from a program) may have
		// died while it waited (the template's end, a kill): another one
		// takes the program.
		if err != nil && !fresh && k.ended() && ctx.Err() == nil {
			continue
		}
		return p, err
	}
}

// ForkSession is Fork for a child of the template's own that serves a
// session: its runtime keeps its state between executions (the fork
// request says so; nothing in the child's environment does). Long-lived,
// it is held to its CPU limit per execution by the CPU watch where a
// cgroup counts its time, not by an RLIMIT_CPU that would count its whole
// life.
func (t *Template) ForkSession(ctx context.Context, stdout, stderr *os.File, extra []*os.File) (*Process, error) {
	return t.fork(ctx, stdout, stderr, extra, nil)
}

// newProcess is a Process of a child of the template, or of a keeper.
func (t *Template) newProcess() *Process {
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
	return p
}

// fork asks the template for a child of its own: the keeper keeps, or
// with none a session's.
func (t *Template) fork(ctx context.Context, stdout, stderr *os.File, extra []*os.File, keeps *keeper) (*Process, error) {
	p := t.newProcess()
	p.keeps = keeps
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
	msg, _ := json.Marshal(forkRequest{Cgroups: len(procs), Extra: len(extra), UID: p.hostID, Session: keeps == nil}) // plain data
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		closeAll(hostEnd, childEnd)
		return nil, p.abort(errors.New("sandbox: template is closed"))
	}
	_, _, err = t.ctl.WriteMsgUnix(msg, unix.UnixRights(fdsOf(files)...), nil)
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
	// A hung template may still move a child into the cgroups and give it
	// the uid: neither is reused until the template is gone.
	// A keeper's CPU is its programs' to watch, each its own.
	if err := p.follow(ctx, hostEnd, keeps == nil, func() { p.idsAfter, p.cgSlots = t.done, nil }); err != nil {
		return nil, err
	}
	return p, nil
}

// follow owns a started child through hostEnd, its status socket, and
// waits until it runs, locked down, or ctx ends; then, with watchCPU, the
// CPU watch holds it to its limit where a cgroup counts its time. abandon,
// under p.mu, keeps what a child the template forks late may yet use.
func (p *Process) follow(ctx context.Context, hostEnd *os.File, watchCPU bool, abandon func()) error {
	conn, err := net.FileConn(hostEnd)
	_ = hostEnd.Close()
	if err != nil {
		p.mu.Lock()
		abandon()
		p.mu.Unlock()
		return p.abort(fmt.Errorf("sandbox: status socket: %w", err))
	}
	started := make(chan error, 1)
	go p.ownForked(conn.(*net.UnixConn), started)
	select {
	case err := <-started:
		if err != nil {
			return err
		}
		if watchCPU && p.layers.CPU != KindRlimit {
			go p.watchCPU()
		}
		return nil
	case <-ctx.Done():
		_ = p.Kill()
		// A hung template or keeper never closes its end: closing ours
		// ends the owner's wait; a child forked later finds nobody to
		// report to, and Kill reached it once its pidfd arrived, if ever.
		p.mu.Lock()
		abandon()
		p.mu.Unlock()
		_ = conn.Close()
		<-p.done
		return fmt.Errorf("sandbox: fork: %w", ctx.Err())
	}
}

// fdsOf is the descriptors of files.
func fdsOf(files []*os.File) []int {
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	return fds
}

// forkRequest asks the template for one child; the files travel beside it
// (SCM_RIGHTS): the status socket, fds 1 and 2, Extra files, then Cgroups
// cgroup.procs files.
type forkRequest struct {
	Cgroups int `json:"cgroups"`
	Extra   int `json:"extra"`
	UID     int `json:"uid"` // the child's host uid
	// Session: the child's runtime serves a session; otherwise the child
	// is a keeper (keeper.go).
	Session bool `json:"session,omitempty"`
}

// forkReport is one message of a forked child's status socket.
type forkReport struct {
	report
	Pid int `json:"pid"`
}
