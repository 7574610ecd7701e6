// Package affinity keeps the host's threads, and the worker processes that
// answer it back and forth, on one CPU while the host runs its Go code on
// one P (host/maxprocs pins and releases) and such a worker runs (it
// follows the pin) without computing for long (Busy), and starts every
// other child off that pin.
//
// Why: on a VM an idle vCPU halts, and waking a thread on it is an
// interrupt through the hypervisor. A TypeScript execution crosses from
// the server to its worker and back; on one CPU each crossing is a local
// switch. On 2 vCPUs, one client: a median 12 % more executions a second
// (3–22 % over 6 pairs) and 15 % less CPU (docs/benchmarks.md). Forked Python programs are not
// followers (their fork and exit are better spread over every CPU), and a
// host without a follower is not pinned; under load one CPU would cap the
// host, so the pin goes with the one P.
package affinity

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"unsafe"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// Pin is a process's pin. Affinity belongs to threads, so a process has
// one: Process. Its methods are safe for concurrent use.
type Pin struct {
	mu   sync.RWMutex
	want bool        // To was called, Release not since
	cpu  int         // pinned to; -1: not pinned
	own  unix.CPUSet // the threads' CPUs before the pin
	// followers are the roots of process trees that follow the pin, each
	// with how many times it follows. The pin holds only while there is
	// one: a host whose work is forked Python programs, spread over every
	// CPU, is better off free (docs/benchmarks.md).
	followers map[int]int
	// long counts the followers' executions that run past a moment
	// (Busy): programs that compute rather than answer, which want a CPU
	// each, not the server's.
	long int
}

// Process is this process's pin.
var Process = New()

// New returns a pin that is not pinned; one per process (tests make more).
func New() *Pin { return &Pin{cpu: -1, followers: map[int]int{}} }

// To pins every thread of this process, and of the followers' process
// trees, to the CPU the caller runs on, while there are followers (from
// the first one on otherwise) and none of their executions runs long. It
// does nothing on a single CPU.
func (p *Pin) To() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.want = true
	return p.sync()
}

// Release gives every thread of this process and of the followers' trees
// the CPUs they had before the pin.
func (p *Pin) Release() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.want = false
	return p.sync()
}

// CPU is the CPU pinned to, or -1.
func (p *Pin) CPU() int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.cpu
}

// Follow makes the process pid and its descendants follow the pin until
// the returned func is called, which must be as soon as pid has ended (a
// pid is reused). The error is the pin's, which costs only its gain.
func (p *Pin) Follow(pid int) (unfollow func() error, err error) {
	if pid <= 0 {
		return func() error { return nil }, nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.followers[pid]++
	if p.cpu >= 0 {
		err = p.applyTrees([]int{pid}, one(p.cpu))
	} else {
		err = p.sync()
	}
	return p.undo(func() {
		if p.followers[pid]--; p.followers[pid] <= 0 {
			delete(p.followers, pid)
		}
	}), err
}

// Busy says a follower's execution runs long: the pin is released until
// the returned func is called.
func (p *Pin) Busy() (done func() error, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.long++
	return p.undo(func() { p.long-- }), p.sync()
}

// undo returns a func that, once, changes what the pin follows and syncs.
func (p *Pin) undo(change func()) func() error {
	return sync.OnceValue(func() error {
		p.mu.Lock()
		defer p.mu.Unlock()
		change()
		return p.sync()
	})
}

// sync pins or releases as want, the followers and long say.
func (p *Pin) sync() error {
	switch should := p.want && len(p.followers) > 0 && p.long == 0; {
	case should && p.cpu < 0:
		var own unix.CPUSet
		if err := unix.SchedGetaffinity(0, &own); err != nil {
			return fmt.Errorf("affinity: this thread's CPUs: %w", err)
		}
		if own.Count() < 2 {
			return nil
		}
		cpu, err := current()
		if err != nil {
			return fmt.Errorf("affinity: the CPU this thread runs on: %w", err)
		}
		p.own, p.cpu = own, cpu
		return p.apply(one(cpu))
	case !should && p.cpu >= 0:
		// Released only once this process's own threads are: until then
		// Spawn keeps starting children off the pin, and the next sync
		// tries again.
		err := p.apply(&p.own)
		var self *selfError
		if !errors.As(err, &self) {
			p.cpu = -1
		}
		return err
	}
	return nil
}

// selfError is a failure to set this process's own threads.
type selfError struct{ err error }

func (e *selfError) Error() string { return e.err.Error() }
func (e *selfError) Unwrap() error { return e.err }

// Spawn runs start, which starts a child process, from a thread holding
// the CPUs the process had before the pin, so the child never inherits
// it: a template that did would keep every program it forks on one CPU.
func (p *Pin) Spawn(start func() error) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.cpu < 0 {
		return start()
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.SchedSetaffinity(0, &p.own); err != nil {
		return fmt.Errorf("affinity: unpin a thread to start a child: %w", err)
	}
	err := start()
	_ = unix.SchedSetaffinity(0, one(p.cpu)) // pinned or not, the thread runs
	return err
}

// apply sets set on this process's threads (a failure there is a
// *selfError) and the followers' trees.
func (p *Pin) apply(set *unix.CPUSet) error {
	var self error
	if err := setThreads(os.Getpid(), set); err != nil {
		self = &selfError{err}
	}
	if len(p.followers) == 0 {
		return self
	}
	roots := make([]int, 0, len(p.followers))
	for pid := range p.followers {
		roots = append(roots, pid)
	}
	return errors.Join(self, p.applyTrees(roots, set))
}

// applyTrees sets set on every thread of the processes roots and their
// descendants.
func (p *Pin) applyTrees(roots []int, set *unix.CPUSet) error {
	procs, err := procfs.AllProcs()
	if err != nil {
		return fmt.Errorf("affinity: list processes: %w", err)
	}
	children := map[int][]int{}
	for _, pr := range procs {
		if st, err := pr.Stat(); err == nil {
			children[st.PPID] = append(children[st.PPID], pr.PID)
		}
	}
	var errs []error
	for todo := roots; len(todo) > 0; {
		pid := todo[len(todo)-1]
		todo = append(todo[:len(todo)-1], children[pid]...)
		if err := setThreads(pid, set); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// setThreads sets set on every thread of pid, pass after pass until a
// pass finds no thread it had not seen (a thread started meanwhile may
// come from one not yet set), at most maxPasses.
func setThreads(pid int, set *unix.CPUSet) error {
	seen := map[int]bool{}
	var errs []error
	for range maxPasses {
		threads, err := procfs.AllThreads(pid)
		if err != nil {
			return fmt.Errorf("affinity: threads of %d: %w", pid, err)
		}
		fresh := false
		for _, t := range threads {
			tid := t.PID
			if seen[tid] {
				continue
			}
			seen[tid], fresh = true, true
			if err := unix.SchedSetaffinity(tid, set); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("affinity: thread %d of %d: %w", tid, pid, err))
			}
		}
		if !fresh {
			break
		}
	}
	return errors.Join(errs...)
}

// maxPasses bounds setThreads' passes over a process whose threads keep
// coming.
const maxPasses = 5

func one(cpu int) *unix.CPUSet {
	var s unix.CPUSet
	s.Set(cpu)
	return &s
}

// current is the CPU the calling thread runs on (getcpu(2)).
func current() (int, error) {
	var cpu uint32
	if _, _, errno := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), 0, 0); errno != 0 {
		return -1, errno
	}
	return int(cpu), nil
}
