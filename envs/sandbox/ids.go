package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// IDRange is the block of host uids (and the same gids) a root host gives
// its sandboxes, one each for as long as the sandbox lives. The kernel
// counts much per user: inotify and fanotify instances and watches, pipe
// buffer pages, pending signals, message queue bytes, locked shared
// memory, namespaces, processes (docs/sandbox.md, "Per-user kernel
// counts"). A sandbox whose program and user namespace belong to a uid of
// its own can use up only its own share.
type IDRange struct {
	First int `json:"first"`
	Count int `json:"count"`
}

// DefaultIDRange lies in the block systemd leaves unused (1879048192 to
// 2147352575, between its container and foreign ranges), far above login
// users, service users and the subordinate ids of /etc/subuid.
var DefaultIDRange = IDRange{First: 1879048192, Count: 65536}

// IDLockFile is where hosts sharing the machine mark the ids they hold: one
// byte-range lock per id (an open file description lock, released by the
// kernel when the process that holds it dies), so two cyrnel servers never
// hand out the same uid. Every process drawing from overlapping ranges
// must use the same file.
const IDLockFile = "/run/cyrnel-sandbox-ids.lock"

// Validate says whether r is a usable range: above the ids a system gives
// users (65535 and below), and below 2^31-1 (the ids past it are -1 to
// code that holds them in a signed 32-bit integer).
func (r IDRange) Validate() error {
	switch {
	case r.Count < 1:
		return fmt.Errorf("sandbox uid range: want at least one id, got %d", r.Count)
	case r.First <= 65535:
		return fmt.Errorf("sandbox uid range: the first id %d is one a system gives users (want above 65535)", r.First)
	case int64(r.First)+int64(r.Count) > 1<<31-1:
		return fmt.Errorf("sandbox uid range: %d+%d passes 2147483646", r.First, r.Count)
	}
	return nil
}

// ParseIDRange reads a range written FIRST:COUNT, as /etc/subuid does.
func ParseIDRange(s string) (IDRange, error) {
	first, count, ok := strings.Cut(s, ":")
	var r IDRange
	var err1, err2 error
	r.First, err1 = strconv.Atoi(first)
	r.Count, err2 = strconv.Atoi(count)
	if !ok || err1 != nil || err2 != nil {
		return IDRange{}, fmt.Errorf("sandbox uid range %q: want FIRST:COUNT, e.g. %d:%d", s, DefaultIDRange.First, DefaultIDRange.Count)
	}
	return r, r.Validate()
}

// idPool hands out the ids of a range, each to one live sandbox at a time
// across every process that uses the same lock file. It goes round the
// range (next fit), so an id that was just freed is the last to be taken
// again: whatever the kernel frees after the sandbox has gone (deferred
// file releases) is long gone by then.
type idPool struct {
	r        IDRange
	lockPath string

	mu   sync.Mutex
	lock *os.File // nil until the first acquire
	used map[int]bool
	next int // offset into r of the next id to try
}

func newIDPool(r IDRange, lockPath string) *idPool {
	return &idPool{r: r, lockPath: lockPath, used: map[int]bool{}}
}

var (
	idsMu   sync.Mutex
	hostIDs = newIDPool(DefaultIDRange, IDLockFile)
)

// SetIDRange sets the range a root host gives its sandboxes their uids
// from. Call it at start-up, before the first sandbox: it fails once a
// sandbox holds an id.
func SetIDRange(r IDRange) error {
	if err := r.Validate(); err != nil {
		return err
	}
	idsMu.Lock()
	defer idsMu.Unlock()
	if hostIDs.inUse() > 0 {
		return errors.New("sandbox uid range: sandboxes hold ids already; set the range before the first one starts")
	}
	hostIDs.close()
	hostIDs = newIDPool(r, IDLockFile)
	return nil
}

// currentIDs is the pool sandboxes take their ids from.
func currentIDs() *idPool {
	idsMu.Lock()
	defer idsMu.Unlock()
	return hostIDs
}

// CurrentIDRange is the range sandboxes take their uids from.
func CurrentIDRange() IDRange { return currentIDs().r }

// acquire takes an id no live sandbox of this or any other process using
// the lock file holds.
func (p *idPool) acquire() (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lock == nil {
		f, err := os.OpenFile(p.lockPath, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return 0, fmt.Errorf("sandbox uids: open the lock file: %w", err)
		}
		p.lock = f
	}
	for range p.r.Count {
		id := p.r.First + p.next
		p.next = (p.next + 1) % p.r.Count
		if p.used[id] {
			continue
		}
		err := p.setLock(id, unix.F_WRLCK)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES) {
			continue // another process's sandbox holds it
		}
		if err != nil {
			return 0, fmt.Errorf("sandbox uids: lock %d: %w", id, err)
		}
		p.used[id] = true
		return id, nil
	}
	return 0, fmt.Errorf("sandbox uids: all %d ids from %d are held by live sandboxes", p.r.Count, p.r.First)
}

// release frees id for another sandbox; call it once nothing of the
// sandbox that held it is left.
func (p *idPool) release(id int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.used[id] {
		return fmt.Errorf("sandbox uids: %d is not held", id)
	}
	delete(p.used, id)
	if err := p.setLock(id, unix.F_UNLCK); err != nil {
		return fmt.Errorf("sandbox uids: unlock %d: %w", id, err)
	}
	return nil
}

// setLock sets or clears the lock on the byte at offset id: open file
// description locks belong to the open file, not the process, so they
// conflict between two pools of one process too, and end with it.
func (p *idPool) setLock(id int, typ int16) error {
	lk := unix.Flock_t{Type: typ, Whence: 0, Start: int64(id), Len: 1}
	return unix.FcntlFlock(p.lock.Fd(), unix.F_OFD_SETLK, &lk)
}

func (p *idPool) held(id int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.used[id]
}

func (p *idPool) inUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.used)
}

func (p *idPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lock != nil {
		_ = p.lock.Close() // drops the locks, of which there are none
		p.lock = nil
	}
}
