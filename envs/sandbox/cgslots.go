package sandbox

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cgroupSlots keeps the cgroups of a template's ended children for the
// next ones: creating and removing a sandbox's cgroups (a mkdir, the limit
// writes and an rmdir in each hierarchy, four on a v1 host) cost more than
// everything else the host does for a forked child. A set of cgroups is
// reused only once it is verified empty (no process in any of its
// hierarchies) and holding no more memory than maxLeftBytes; its counters
// then start over (the peak is reset, the cumulative ones get a new base),
// so an execution sees nothing of the one before. Anything else removes it.
type cgroupSlots struct {
	sup    Support
	limits Limits

	mu     sync.Mutex
	free   []*cgroups
	closed bool
}

// maxFreeCgroups bounds the kept sets: more than the children a 2-core
// host runs at once.
const maxFreeCgroups = 32

// maxLeftBytes is the most memory a set of cgroups may still be charged
// for once its processes are gone, and be reused. What is left then holds
// nothing of the program: kernel objects freed later (RCU, 20–1000 KiB
// measured) and the per-CPU charge cache (up to 256 KiB a CPU); the page
// cache and the tmpfs pages of a program are gone (0 in memory.stat).
// Emptying it (memory.force_empty) costs 0.3–4 ms a time.
const maxLeftBytes = 2 << 20

func newCgroupSlots(sup Support, l Limits) *cgroupSlots {
	return &cgroupSlots{sup: sup, limits: l}
}

// take returns a verified set of cgroups, or new ones, with a cgroup.procs
// descriptor open in each hierarchy.
func (s *cgroupSlots) take() (*cgroups, error) {
	s.mu.Lock()
	if n := len(s.free); n > 0 {
		cg := s.free[n-1]
		s.free = s.free[:n-1]
		s.mu.Unlock()
		return cg, nil
	}
	s.mu.Unlock()
	cg, err := newCgroups(s.sup, s.limits)
	if err != nil {
		return nil, err
	}
	if err := cg.openProcs(); err != nil {
		return nil, errors.Join(err, cg.remove())
	}
	return cg, nil
}

// put takes back the cgroups of a child that has ended (its PID namespace
// is gone with it, so no process should be left): reused if clean,
// otherwise emptied and removed.
func (s *cgroupSlots) put(cg *cgroups) error {
	if err := cg.startOver(); err != nil {
		cg.killAll()
		return errors.Join(fmt.Errorf("not reused: %w", err), cg.remove())
	}
	s.mu.Lock()
	if !s.closed && len(s.free) < maxFreeCgroups {
		s.free = append(s.free, cg)
		cg = nil
	}
	s.mu.Unlock()
	if cg != nil {
		return cg.remove()
	}
	return nil
}

// close removes the kept cgroups; those put back later are removed then.
func (s *cgroupSlots) close() error {
	s.mu.Lock()
	free := s.free
	s.free, s.closed = nil, true
	s.mu.Unlock()
	var errs []error
	for _, cg := range free {
		errs = append(errs, cg.remove())
	}
	return errors.Join(errs...)
}

// openProcs opens cgroup.procs of each hierarchy, read-write: the template
// moves each child in through it, and startOver reads it.
func (cg *cgroups) openProcs() error {
	for _, dir := range cg.dirs() {
		f, err := os.OpenFile(dir+"/cgroup.procs", os.O_RDWR, 0)
		if err != nil {
			return fmt.Errorf("open cgroup: %w", err)
		}
		cg.procs = append(cg.procs, f)
	}
	return nil
}

// startOver verifies that the cgroups hold no process and (almost) no
// memory, and starts their counters over for the next child.
func (cg *cgroups) startOver() error {
	if len(cg.procs) == 0 {
		return errors.New("cgroup.procs not open")
	}
	for _, f := range cg.procs {
		b, err := readFrom(f)
		if err != nil {
			return err
		}
		if len(strings.TrimSpace(string(b))) != 0 {
			return fmt.Errorf("%s still holds processes", f.Name())
		}
	}
	if cg.memory != "" {
		name := "/memory.usage_in_bytes"
		if cg.memVersion == 2 {
			name = "/memory.current"
		}
		b, err := cg.read(cg.memory + name)
		if err != nil {
			return fmt.Errorf("read memory usage: %w", err)
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n > maxLeftBytes {
			return fmt.Errorf("%s still holds %q bytes", cg.memory, strings.TrimSpace(string(b)))
		}
	}
	return cg.restart()
}

// restart starts the cgroups' counters over for the next program: the
// peak memory, and the base of CPU time, OOM kills and refused forks.
func (cg *cgroups) restart() error {
	if cg.memory != "" {
		if err := cg.resetPeak(); err != nil {
			return err
		}
	}
	var base counters
	if cg.acctVersion != 0 {
		cpu, err := cg.cpuUsage()
		if err != nil {
			return err
		}
		base.cpu = cpu + cg.base.cpu // cpuUsage is already past the old base
	}
	if cg.memory != "" {
		base.oomKills = cg.oomKills()
	}
	if cg.pids != "" {
		base.forksRefused = cg.forksRefused()
	}
	cg.base = base
	return nil
}

// counters are the cumulative counters of a set of cgroups when it was
// last started over: what an execution reports is the difference.
type counters struct {
	cpu                    time.Duration
	oomKills, forksRefused int64
}
