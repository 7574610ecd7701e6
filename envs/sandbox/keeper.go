package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// A keeper is a child of the template that stays (docs/sandbox.md,
// "Keepers"): PID 1 of its own namespaces and cgroups, locked down like
// every child, it forks each program it is given from itself, one at a
// time, each a fresh copy of the template's interpreter. Once a program
// has ended it kills what the program left, empties /tmp and /dev/shm and
// checks its IPC namespace, then reports the end; where it cannot, it says
// it is spent and exits. A program so costs a plain fork of a locked-down
// interpreter, not new namespaces, cgroups, mounts and filters.
//
// On its control socket (its fd 3) the host sends one message per program
// with the fds [status, fd 1, fd 2, extra files…]; the status socket then
// carries what a child of the template's reports, the exit with "spent"
// when the keeper retires.
type keeper struct {
	tpl  *Template
	proc *Process      // the keeper itself
	ctl  *net.UnixConn // the keeper's control socket
	runs int           // programs given it, under tpl.mu
	// free holds a token while no program of the keeper runs: a program
	// shares the keeper's cgroups, which the keeper's end gives back only
	// once it holds the token.
	free chan struct{}
}

const (
	// maxIdleKeepers bounds the keepers a template holds between
	// programs (each holds a uid, cgroups and namespaces).
	maxIdleKeepers = 16
	// maxKeeperRuns retires a keeper after that many programs: its pid
	// numbers only grow.
	maxKeeperRuns = 1000
)

// keeper returns an idle keeper of the template, or one forked for the
// program (fresh), its token taken and the program counted.
func (t *Template) keeper(ctx context.Context) (k *keeper, fresh bool, err error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, false, errors.New("sandbox: template is closed")
	}
	for len(t.idle) > 0 {
		k := t.idle[len(t.idle)-1]
		t.idle = t.idle[:len(t.idle)-1]
		select {
		case <-k.free:
			if !k.ended() {
				k.runs++
				t.mu.Unlock()
				return k, false, nil
			}
			k.free <- struct{}{}
		default: // its end holds the token
		}
		_ = k.ctl.Close()
	}
	t.mu.Unlock()
	if k, err = t.newKeeper(ctx); err != nil {
		return nil, true, err
	}
	t.mu.Lock()
	k.runs++
	t.mu.Unlock()
	return k, true, nil
}

// newKeeper forks a keeper, busy (its token taken), with no program yet.
func (t *Template) newKeeper(ctx context.Context) (*keeper, error) {
	host, child, err := seqpacketPair()
	if err != nil {
		return nil, err
	}
	null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		closeAll(host, child)
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	k := &keeper{tpl: t, free: make(chan struct{}, 1)}
	k.free <- struct{}{}
	p, err := t.fork(ctx, null, null, []*os.File{child}, k)
	closeAll(null, child)
	if err != nil {
		_ = host.Close()
		return nil, err
	}
	k.proc = p
	select {
	case <-k.free: // busy until its caller gives it a program or lets it idle
	default:
		_ = host.Close()
		return nil, errors.New("sandbox: the keeper ended as it started")
	}
	conn, err := net.FileConn(host)
	_ = host.Close()
	if err != nil {
		k.free <- struct{}{}
		_ = p.Kill()
		return nil, fmt.Errorf("sandbox: keeper's control socket: %w", err)
	}
	k.ctl = conn.(*net.UnixConn)
	return k, nil
}

// forkKeepers forks n keepers and leaves them idle. A new keeper is a clone
// into seven namespaces with its mounts, filters and uid maps, which the
// template makes one at a time (3–14 ms each here): the first programs of
// a new template would otherwise queue behind them, one of one client's
// first requests after a switch waiting 12–25 ms. A keeper that fails to
// start is logged: programs then fork their own.
func (t *Template) forkKeepers(ctx context.Context, n int) {
	for range n {
		k, err := t.newKeeper(ctx)
		if err != nil {
			t.logger.Warn("sandbox: a keeper forked ahead failed", "err", err)
			return
		}
		k.ran(true)
	}
}

// run has the keeper fork one program, with its cgroups' counters started
// over for it.
func (k *keeper) run(ctx context.Context, stdout, stderr *os.File, extra []*os.File) (*Process, error) {
	p := k.tpl.newProcess()
	p.layers, p.cg, p.keeper = k.proc.layers, k.proc.cg, k
	if p.cg != nil {
		if err := p.cg.restart(); err != nil {
			return nil, p.abort(fmt.Errorf("sandbox: %w", err))
		}
	}
	hostEnd, childEnd, err := seqpacketPair()
	if err != nil {
		return nil, p.abort(err)
	}
	files := append([]*os.File{childEnd, stdout, stderr}, extra...)
	_, _, err = k.ctl.WriteMsgUnix([]byte("run"), unix.UnixRights(fdsOf(files)...), nil)
	_ = childEnd.Close()
	if err != nil {
		_ = hostEnd.Close()
		return nil, p.abort(fmt.Errorf("sandbox: keeper: %w", err))
	}
	if err := p.follow(ctx, hostEnd, true, func() {}); err != nil {
		return nil, err
	}
	return p, nil
}

// ended says whether the keeper has ended.
func (k *keeper) ended() bool {
	select {
	case <-k.proc.Done():
		return true
	default:
		return false
	}
}

// ran takes the keeper back once its program has ended and it reported
// itself clean; otherwise, or when the template holds enough idle ones,
// the keeper retires.
func (k *keeper) ran(clean bool) {
	k.free <- struct{}{}
	t := k.tpl
	t.mu.Lock()
	if clean && !t.closed && k.runs < maxKeeperRuns && len(t.idle) < maxIdleKeepers && !k.ended() {
		t.idle = append(t.idle, k)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	k.retire()
}

// retire ends the keeper; the kernel ends its namespaces with it, and its
// cgroups and uid go back as any child's.
func (k *keeper) retire() {
	_ = k.proc.Kill()
	_ = k.ctl.Close()
}

// retireIdle retires the idle keepers of a template that forks no more.
func (t *Template) retireIdle() {
	t.mu.Lock()
	idle := t.idle
	t.idle = nil
	t.mu.Unlock()
	for _, k := range idle {
		k.retire()
	}
}
