package sandbox

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// CgroupSupport says whether and where per-sandbox cgroups of one
// controller can be created.
type CgroupSupport struct {
	// Version is 1 or 2; 0 when the controller cannot be used.
	Version int `json:"version"`
	// Dir is the cgroup the sandboxes' cgroups are created in: the host's
	// own cgroup for the controller, so its limits still hold them.
	Dir string `json:"dir,omitempty"`
	// Err says why the controller cannot be used.
	Err string `json:"error,omitempty"`
}

// OK reports whether the controller can be used.
func (c CgroupSupport) OK() bool { return c.Version != 0 }

// detectCgroup finds the controller in /proc/self/mountinfo and
// /proc/self/cgroup, without assuming v1, v2 or a hybrid layout, and checks
// that a child cgroup can be created there.
func detectCgroup(controller string) CgroupSupport {
	dir, version, err := cgroupDir(controller)
	if err == nil {
		err = checkCgroupDir(dir, controller, version)
	}
	if err != nil {
		return CgroupSupport{Err: err.Error()}
	}
	return CgroupSupport{Version: version, Dir: dir}
}

func cgroupDir(controller string) (string, int, error) {
	own, err := ownCgroups()
	if err != nil {
		return "", 0, err
	}
	mounts, err := cgroupMounts()
	if err != nil {
		return "", 0, err
	}
	// A v1 hierarchy with the controller wins: in a hybrid layout the v2
	// tree then lacks it.
	for _, m := range mounts {
		if m.version != 1 || !slices.Contains(m.options, controller) {
			continue
		}
		for key, path := range own {
			if slices.Contains(strings.Split(key, ","), controller) {
				return m.join(path), 1, nil
			}
		}
		return "", 0, fmt.Errorf("cgroup v1 %s: own cgroup unknown", controller)
	}
	for _, m := range mounts {
		if m.version != 2 {
			continue
		}
		path, ok := own[""]
		if !ok {
			return "", 0, fmt.Errorf("cgroup v2: own cgroup unknown")
		}
		dir := m.join(path)
		avail, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
		if err != nil {
			return "", 0, fmt.Errorf("cgroup v2: %w", err)
		}
		if !slices.Contains(strings.Fields(string(avail)), controller) {
			continue
		}
		return dir, 2, nil
	}
	return "", 0, fmt.Errorf("no cgroup hierarchy has the %s controller", controller)
}

// checkCgroupDir proves a child cgroup with the controller can be made in
// dir. On v2 the controller must be enabled for children; enabling it fails
// when dir holds processes itself (the no-internal-processes rule), which
// only the operator can fix (e.g. systemd Delegate= plus a leaf cgroup).
func checkCgroupDir(dir, controller string, version int) error {
	if version == 2 {
		sub, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		if err != nil {
			return fmt.Errorf("cgroup v2: %w", err)
		}
		if !slices.Contains(strings.Fields(string(sub)), controller) {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+controller), 0); err != nil {
				return fmt.Errorf("cgroup v2: enable %s for child cgroups of %s: %w", controller, dir, err)
			}
		}
	}
	probe := filepath.Join(dir, "cyrnel-probe-"+strconv.Itoa(os.Getpid()))
	if err := os.Mkdir(probe, 0o755); err != nil {
		return fmt.Errorf("cgroup v%d %s: %w", version, controller, err)
	}
	if err := os.Remove(probe); err != nil {
		return fmt.Errorf("cgroup v%d %s: %w", version, controller, err)
	}
	return nil
}

// ownCgroups maps the controller list of each hierarchy ("" for v2) to this
// process's cgroup path in it.
func ownCgroups() (map[string]string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("read own cgroups: %w", err)
	}
	own := map[string]string{}
	for line := range strings.Lines(string(b)) {
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) == 3 {
			own[parts[1]] = parts[2]
		}
	}
	return own, nil
}

type cgroupMount struct {
	version    int
	root       string // the cgroup mounted there (not "/" inside some containers)
	mountPoint string
	options    []string // super options; v1 lists the controllers among them
}

func (m cgroupMount) join(path string) string {
	rel, err := filepath.Rel(m.root, path)
	if err != nil || strings.HasPrefix(rel, "..") {
		rel = "."
	}
	return filepath.Join(m.mountPoint, rel)
}

func cgroupMounts() ([]cgroupMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	var mounts []cgroupMount
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional…] - fstype source superoptions
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, qf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(qf) < 3 {
			continue
		}
		m := cgroupMount{root: unescapeMount(pf[3]), mountPoint: unescapeMount(pf[4]), options: strings.Split(qf[2], ",")}
		switch qf[0] {
		case "cgroup":
			m.version = 1
		case "cgroup2":
			m.version = 2
		default:
			continue
		}
		mounts = append(mounts, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	return mounts, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// cgroups are one sandbox's cgroups: one directory per hierarchy (a v1
// layout has one each for memory, pids, cpu and cpuacct, v2 one for all).
type cgroups struct {
	memory, pids, cpu, cpuacct string // "" when that controller is not used
	memVersion, acctVersion    int

	// peak is the peak memory held open: memory.max_usage_in_bytes on v1;
	// memory.peak on v2, where a write resets the peak this descriptor
	// reports (kernel 6.12+). nil on v2: read the cgroup's lifetime peak
	// instead.
	peak *os.File
	// usage is the CPU counter held open (cpuacct.usage on v1, cpu.stat on
	// v2). It and peak are read at every execution's start and end: opening
	// a cgroup file costs ten times its read (12–17 µs against 1 µs), on a
	// warm execution's path. Callers hold the sandbox's mutex.
	usage *os.File
	// procs are the hierarchies' cgroup.procs held open while the cgroups
	// are kept for reuse (cgroupSlots); base is what the cumulative
	// counters read when they were last started over.
	procs []*os.File
	base  counters
	// held are the other counter files read at every child's end, held
	// open by path (a reused set reads them again for the next child).
	held map[string]*os.File
}

// cgroupPrefix starts every sandbox cgroup's name, followed by the host's
// pid, so a later host can tell the cgroups of hosts that died.
const cgroupPrefix = "cyrnel-sbx-"

// cfsPeriod is the CFS bandwidth period: quota is granted per 100 ms.
const cfsPeriod = 100_000 // µs

// newCgroups creates the sandbox's cgroups, one per controller sup offers,
// and sets their limits. It is one primitive: a forked child can be given
// cgroups of its own the same way.
func newCgroups(sup Support, l Limits) (*cgroups, error) {
	var suffix [8]byte
	_, _ = rand.Read(suffix[:]) // never fails on Linux
	name := fmt.Sprintf("%s%d-%s", cgroupPrefix, os.Getpid(), hex.EncodeToString(suffix[:]))
	cg := &cgroups{memVersion: sup.Memory.Version, acctVersion: sup.CPUAcct.Version}
	for _, c := range []struct {
		dir *string
		sup CgroupSupport
	}{{&cg.memory, sup.Memory}, {&cg.pids, sup.Pids}, {&cg.cpu, sup.CPU}, {&cg.cpuacct, sup.CPUAcct}} {
		if c.sup.OK() {
			*c.dir = filepath.Join(c.sup.Dir, name)
		}
	}
	for _, dir := range cg.dirs() {
		if err := os.Mkdir(dir, 0o755); err != nil {
			cg.remove()
			return nil, fmt.Errorf("create cgroup: %w", err)
		}
	}
	var writes [][2]string
	if sup.Memory.Version == 1 {
		limit := strconv.FormatInt(l.MemoryBytes, 10)
		writes = append(writes, [2]string{cg.memory + "/memory.limit_in_bytes", limit})
		// memsw exists only with swap accounting; it must follow the
		// memory limit, and keeps the program from swapping past it.
		if _, err := os.Stat(cg.memory + "/memory.memsw.limit_in_bytes"); err == nil {
			writes = append(writes, [2]string{cg.memory + "/memory.memsw.limit_in_bytes", limit})
		}
	}
	if sup.Memory.Version == 2 {
		writes = append(writes, [2]string{cg.memory + "/memory.max", strconv.FormatInt(l.MemoryBytes, 10)})
		if _, err := os.Stat(cg.memory + "/memory.swap.max"); err == nil {
			writes = append(writes, [2]string{cg.memory + "/memory.swap.max", "0"})
		}
	}
	if sup.Pids.OK() {
		writes = append(writes, [2]string{cg.pids + "/pids.max", strconv.FormatInt(l.Procs, 10)})
	}
	quota := strconv.FormatInt(l.CPUMillicores*cfsPeriod/1000, 10)
	switch sup.CPU.Version {
	case 1:
		writes = append(writes, [2]string{cg.cpu + "/cpu.cfs_period_us", strconv.Itoa(cfsPeriod)},
			[2]string{cg.cpu + "/cpu.cfs_quota_us", quota})
	case 2:
		writes = append(writes, [2]string{cg.cpu + "/cpu.max", quota + " " + strconv.Itoa(cfsPeriod)})
	}
	for _, w := range writes {
		if err := os.WriteFile(w[0], []byte(w[1]), 0); err != nil {
			cg.remove()
			return nil, fmt.Errorf("set cgroup limit: %w", err)
		}
	}
	return cg, nil
}

// cpuUsage is the CPU time every process of the sandbox has used so far,
// the dead included: cpuacct.usage (v1, ns) or cpu.stat usage_usec (v2).
func (cg *cgroups) cpuUsage() (time.Duration, error) {
	if cg.acctVersion == 0 {
		return 0, errors.New("read CPU usage: no CPU accounting cgroup")
	}
	if cg.usage == nil {
		name := "/cpuacct.usage"
		if cg.acctVersion == 2 {
			name = "/cpu.stat"
		}
		f, err := os.Open(cg.cpuacct + name)
		if err != nil {
			return 0, fmt.Errorf("read CPU usage: %w", err)
		}
		cg.usage = f
	}
	b, err := readFrom(cg.usage)
	if err != nil {
		return 0, fmt.Errorf("read CPU usage: %w", err)
	}
	if cg.acctVersion == 2 {
		n, ok := counter(b, "usage_usec")
		if !ok {
			return 0, fmt.Errorf("read CPU usage: no usage_usec in %s/cpu.stat", cg.cpuacct)
		}
		return time.Duration(n)*time.Microsecond - cg.base.cpu, nil
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read CPU usage: %w", err)
	}
	return time.Duration(n) - cg.base.cpu, nil
}

// readFrom reads a cgroup counter file held open. One pread: a cgroup
// file gives its whole text to a read at offset 0, and os.File.ReadAt
// would read a second time to see the end (one syscall more per counter on
// every execution's path).
func readFrom(f *os.File) ([]byte, error) {
	buf := make([]byte, 1024) // cpu.stat, the longest, is a few hundred bytes
	rc, err := f.SyscallConn()
	if err != nil {
		return nil, err
	}
	var n int
	var rerr error
	if err := rc.Read(func(fd uintptr) bool {
		n, rerr = syscall.Pread(int(fd), buf, 0)
		return true
	}); err != nil {
		return nil, err
	}
	switch {
	case rerr != nil:
		return nil, fmt.Errorf("read %s: %w", f.Name(), rerr)
	case n == len(buf): // maybe cut short: never parse a partial number
		return nil, fmt.Errorf("read %s: %d bytes or more, more than a counter file holds", f.Name(), len(buf))
	}
	return buf[:n], nil
}

// peakMemory is the most memory the sandbox has held since resetPeak (or
// since it started): memory.max_usage_in_bytes (v1) or memory.peak (v2).
func (cg *cgroups) peakMemory() (int64, error) {
	var b []byte
	var err error
	switch {
	case cg.peak != nil:
		b, err = readFrom(cg.peak)
	case cg.memVersion == 1:
		b, err = os.ReadFile(cg.memory + "/memory.max_usage_in_bytes")
	case cg.memVersion == 2:
		b, err = os.ReadFile(cg.memory + "/memory.peak")
	default:
		return 0, errors.New("read peak memory: no memory cgroup")
	}
	if err != nil {
		return 0, fmt.Errorf("read peak memory: %w", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read peak memory: %w", err)
	}
	return n, nil
}

// resetPeak starts the peak memory over from the current usage, so a
// worker serving several executions reports each one's own peak.
func (cg *cgroups) resetPeak() error {
	switch cg.memVersion {
	case 1:
		if cg.peak == nil {
			f, err := os.OpenFile(cg.memory+"/memory.max_usage_in_bytes", os.O_RDWR, 0)
			if err != nil {
				return fmt.Errorf("reset peak memory: %w", err)
			}
			cg.peak = f
		}
		if _, err := cg.peak.WriteAt([]byte("0"), 0); err != nil {
			return fmt.Errorf("reset peak memory: %w", err)
		}
	case 2:
		if cg.peak == nil {
			f, err := os.OpenFile(cg.memory+"/memory.peak", os.O_RDWR, 0)
			if err != nil {
				return nil // before 6.12 memory.peak is read-only: the lifetime peak it is
			}
			cg.peak = f
		}
		if _, err := cg.peak.WriteAt([]byte("reset\n"), 0); err != nil {
			_ = cg.peak.Close()
			cg.peak = nil
			return nil // as above
		}
	}
	return nil
}

func (cg *cgroups) dirs() []string {
	var dirs []string
	for _, d := range []string{cg.memory, cg.pids, cg.cpu, cg.cpuacct} {
		if d != "" && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// add moves a process into every cgroup of the sandbox.
func (cg *cgroups) add(pid int) error {
	for _, dir := range cg.dirs() {
		if err := os.WriteFile(dir+"/cgroup.procs", []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("join cgroup %s: %w", dir, err)
		}
	}
	return nil
}

// oomKilled reports whether the memory cgroup's OOM killer ended a process
// since the cgroups were made or last started over.
func (cg *cgroups) oomKilled() bool {
	return cg.memory != "" && cg.oomKills() > cg.base.oomKills
}

// oomKills is the memory cgroup's count of processes its OOM killer ended.
func (cg *cgroups) oomKills() int64 {
	// v1 keeps the counter in memory.oom_control, v2 in memory.events.
	file := "memory.oom_control"
	if cg.memVersion == 2 {
		file = "memory.events"
	}
	n, _ := cg.readCounter(filepath.Join(cg.memory, file), "oom_kill")
	return n
}

// forkRefused reports whether the pids cgroup refused a fork since the
// cgroups were made or last started over.
func (cg *cgroups) forkRefused() bool {
	return cg.pids != "" && cg.forksRefused() > cg.base.forksRefused
}

// forksRefused is the pids cgroup's count of refused forks.
func (cg *cgroups) forksRefused() int64 {
	n, _ := cg.readCounter(filepath.Join(cg.pids, "pids.events"), "max")
	return n
}

// killAll SIGKILLs every process in the sandbox's cgroups until none is
// left: without a PID namespace this is the only way to find processes
// that left the process group.
func (cg *cgroups) killAll() {
	for _, dir := range cg.dirs() {
		killIn(dir)
	}
}

// killIn SIGKILLs the processes of the cgroup dir until none is left.
func killIn(dir string) {
	for range 100 { // each pass kills what it saw; forks in flight need another
		b, err := os.ReadFile(dir + "/cgroup.procs")
		if err != nil || len(strings.TrimSpace(string(b))) == 0 {
			return
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL) // already gone is fine
			}
		}
	}
}

// remove deletes the cgroups.
func (cg *cgroups) remove() error {
	var errs []error
	for _, f := range []**os.File{&cg.peak, &cg.usage} {
		if *f != nil {
			_ = (*f).Close() // control files: nothing buffered
			*f = nil
		}
	}
	closeAll(cg.procs...)
	cg.procs = nil
	for _, f := range cg.held {
		_ = f.Close()
	}
	cg.held = nil
	for _, dir := range cg.dirs() {
		errs = append(errs, removeCgroup(dir))
	}
	return errors.Join(errs...)
}

// removeCgroup deletes the cgroup dir. A cgroup can be removed once its
// last process is reaped; the kernel may still be finishing that, so busy
// is retried for a short while.
func removeCgroup(dir string) error {
	deadline := time.Now().Add(2 * time.Second)
	for {
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup: %w", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sweepCgroups removes the sandbox cgroups in dirs left behind by hosts that
// died before cleaning up. Their sandboxes die with them (Pdeathsig), but
// not at once: what a dead host's cgroup still holds is killed, and the
// cgroup removed once the kernel has reaped it. A cgroup whose host pid is
// alive stays.
func sweepCgroups(dirs ...string) {
	var dead []string
	for _, dir := range dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			host, _, ok := strings.Cut(strings.TrimPrefix(e.Name(), cgroupPrefix), "-")
			pid, err := strconv.Atoi(host)
			if !ok || !strings.HasPrefix(e.Name(), cgroupPrefix) || err != nil || pid == os.Getpid() {
				continue
			}
			if syscall.Kill(pid, 0) == syscall.ESRCH {
				dead = append(dead, filepath.Join(dir, e.Name()))
			}
		}
	}
	for _, dir := range dead {
		killIn(dir)
		_ = removeCgroup(dir) // what stays busy is tried again at the next start
	}
}

// readCounter reads "key value" from a cgroup's flat-keyed file, held open.
func (cg *cgroups) readCounter(path, key string) (int64, bool) {
	b, err := cg.read(path)
	if err != nil {
		return 0, false
	}
	return counter(b, key)
}

// read reads a cgroup file through a descriptor held open.
func (cg *cgroups) read(path string) ([]byte, error) {
	f := cg.held[path]
	if f == nil {
		var err error
		if f, err = os.Open(path); err != nil {
			return nil, err
		}
		if cg.held == nil {
			cg.held = map[string]*os.File{}
		}
		cg.held[path] = f
	}
	return readFrom(f)
}

// counter is the value of key in a flat-keyed cgroup file's text.
func counter(b []byte, key string) (int64, bool) {
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && k == key {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
