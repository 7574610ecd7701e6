package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// userHZ is the unit of the times in /proc/<pid>/stat: USER_HZ, 100 on
// every Linux architecture Go supports (the kernel converts to it for
// user space whatever its own tick rate).
const userHZ = 100

// pfKthread is PF_KTHREAD in the flags field of /proc/<pid>/stat.
const pfKthread = 0x00200000

// procTimes is one process's CPU and minor (copy-on-write among them) page
// faults from /proc/<pid>/stat: its own (every thread's) and those of the
// children it has reaped.
type procTimes struct {
	self, children      time.Duration
	minflt, childMinflt int64
	flags               uint64
}

// readProcTimes reads /proc/<pid>/stat (proc(5): fields 9 flags, 10
// minflt, 11 cminflt, 14–17 utime, stime, cutime, cstime in USER_HZ ticks).
func readProcTimes(pid int) (procTimes, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procTimes{}, err
	}
	// The command name may hold spaces and parentheses: fields start after the last ')'.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return procTimes{}, fmt.Errorf("/proc/%d/stat: %q", pid, data)
	}
	f := strings.Fields(string(data[i+1:])) // f[0] is field 3 (state)
	if len(f) < 15 {
		return procTimes{}, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	n := func(k int) int64 { v, _ := strconv.ParseInt(f[k-3], 10, 64); return v }
	tick := func(v int64) time.Duration { return time.Duration(v) * time.Second / userHZ }
	flags, _ := strconv.ParseUint(f[9-3], 10, 64)
	return procTimes{
		self: tick(n(14) + n(15)), children: tick(n(16) + n(17)),
		minflt: n(10), childMinflt: n(11), flags: flags,
	}, nil
}

// kernelThreads reads every kernel thread's CPU (utime+stime) by pid.
func kernelThreads() map[int]time.Duration {
	out := map[int]time.Duration{}
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if t, err := readProcTimes(pid); err == nil && t.flags&pfKthread != 0 {
			out[pid] = t.self
		}
	}
	return out
}

// kernelDelta is the CPU kernel threads used between two readings; a
// thread started in between counts whole, one that ended is lost (an
// unbound kworker that exits takes its time with it).
func kernelDelta(before, after map[int]time.Duration) time.Duration {
	var d time.Duration
	for pid, t := range after {
		d += t - before[pid]
	}
	return d
}

// systemBusy reads the busy CPU of the whole machine from /proc/stat
// (every field of the "cpu" line but idle and iowait), and the idle.
func systemBusy(b *testing.B) (busy, idle time.Duration) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)[1:]
	for i, s := range f[:min(len(f), 8)] { // guest time is inside user already
		v, _ := strconv.ParseInt(s, 10, 64)
		if i == 3 || i == 4 {
			idle += time.Duration(v) * time.Second / userHZ
		} else {
			busy += time.Duration(v) * time.Second / userHZ
		}
	}
	return busy, idle
}

// childPids lists the children of pid (every thread's).
func childPids(pid int) []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	for _, t := range tasks {
		data, _ := os.ReadFile(t)
		for _, s := range strings.Fields(string(data)) {
			if c, err := strconv.Atoi(s); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// preloadsAsyncio says whether pid is a Python template whose preload has
// asyncio (the default's): the one that forks the interpreters of
// programs that await, beside one without it for the others.
func preloadsAsyncio(pid int) bool {
	cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.Contains(string(cmdline), "cyrnel._template") && strings.Contains(string(cmdline), "\x00asyncio\x00")
}

// cpuSnapshot is every counter BenchmarkCPUSplit compares.
type cpuSnapshot struct {
	server, template procTimes
	keepers          map[int]procTimes // the template's live children
	kernel           map[int]time.Duration
	busy, idle       time.Duration
}

func snapshot(b *testing.B, server, template int) cpuSnapshot {
	s, err := readProcTimes(server)
	if err != nil {
		b.Fatal(err)
	}
	t, err := readProcTimes(template)
	if err != nil {
		b.Fatal(err)
	}
	keepers := map[int]procTimes{}
	for _, pid := range childPids(template) {
		if k, err := readProcTimes(pid); err == nil {
			keepers[pid] = k
		}
	}
	busy, idle := systemBusy(b)
	return cpuSnapshot{server: s, template: t, keepers: keepers, kernel: kernelThreads(), busy: busy, idle: idle}
}

// keeperDelta is what the template's children used between two
// snapshots: the keepers' own CPU and faults and their programs' (which
// they reap). A keeper that ended meanwhile is in the template's reaped
// children whole: its share before the first snapshot is taken off here.
func keeperDelta(before, after cpuSnapshot) (keepers, programs procTimes) {
	for pid, a := range after.keepers {
		b := before.keepers[pid] // zero for one born meanwhile
		keepers.self += a.self - b.self
		keepers.minflt += a.minflt - b.minflt
		programs.self += a.children - b.children
		programs.minflt += a.childMinflt - b.childMinflt
	}
	for pid, b := range before.keepers {
		if _, ok := after.keepers[pid]; !ok {
			keepers.self -= b.self + b.children
			keepers.minflt -= b.minflt + b.childMinflt
		}
	}
	return keepers, programs
}

// forkFloor runs a bare Python parent (as the template that forks `pass`
// preloads nothing: asyncio only in the one for programs that await) that
// forks n children each running `pass`, and returns the
// CPU per fork: the parent's own from getrusage(RUSAGE_SELF) after its
// set-up, plus its children's from getrusage(RUSAGE_CHILDREN), and the
// minor page faults of one child.
func forkFloor(b *testing.B, python string, n int) (parent, child time.Duration, childFaults float64) {
	const script = `import os, resource, sys
n = int(sys.argv[1])
s0 = resource.getrusage(resource.RUSAGE_SELF)
for _ in range(n):
    pid = os.fork()
    if pid == 0:
        pass
        os._exit(0)
    os.waitpid(pid, 0)
s = resource.getrusage(resource.RUSAGE_SELF)
c = resource.getrusage(resource.RUSAGE_CHILDREN)
print(s.ru_utime + s.ru_stime - s0.ru_utime - s0.ru_stime, c.ru_utime + c.ru_stime, c.ru_minflt)
`
	out, err := exec.Command(python, "-I", "-S", "-c", script, strconv.Itoa(n)).Output()
	if err != nil {
		b.Fatal(err)
	}
	var p, c, faults float64
	if _, err := fmt.Sscan(string(out), &p, &c, &faults); err != nil {
		b.Fatalf("fork floor %q: %v", out, err)
	}
	per := func(sec float64) time.Duration { return time.Duration(sec * float64(time.Second) / float64(n)) }
	return per(p), per(c), faults / float64(n)
}

// bareSpawn runs `python3 -I -S -c pass` n times and returns the CPU of
// one (wait4's rusage of each: the child's user and system time).
func bareSpawn(b *testing.B, python string, n int) time.Duration {
	var total time.Duration
	for range n {
		cmd := exec.Command(python, "-I", "-S", "-c", "pass")
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		total += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	return total / time.Duration(n)
}

// BenchmarkCPUSplit: the CPU of one fresh forked Python `pass` execution
// at 8 clients, split by process (docs/benchmarks.md, "Where the time
// goes"): the server (every thread, /proc/<pid>/stat utime+stime), the
// forking template (its own), its children — the keepers (their own, and
// the template's cutime+cstime of those it reaped) and the programs they
// forked (the keepers' cutime+cstime) — and kernel threads (the sum over
// PF_KTHREAD tasks), and the minor page faults of each. Beside them, in
// the same run, the fork floor and a bare spawn. Run with -benchtime 1x;
// CYRNEL_CPUSPLIT_N sets the executions (1,500: the counters tick every
// 10 ms in each keeper).
func BenchmarkCPUSplit(b *testing.B) {
	n := 1500
	if v, err := strconv.Atoi(os.Getenv("CYRNEL_CPUSPLIT_N")); err == nil && v > 0 {
		n = v
	}
	h, python := forkingHost(b)
	server := h.cmd.Process.Pid
	// Its programs never await: the template without asyncio forks them.
	kids := childPids(server)
	if len(kids) != 2 || !slices.ContainsFunc(kids, preloadsAsyncio) {
		b.Fatalf("the server's children are %v, want the two templates", kids)
	}
	template := kids[0]
	if preloadsAsyncio(template) {
		template = kids[1]
	}
	load(b, h, 50, 8, "pass") // warm: connections, pool at its size
	for range b.N {
		waitPoolFull(b, h)
		before := snapshot(b, server, template)
		lat, wall := load(b, h, n, 8, "pass")
		waitPoolFull(b, h) // the refills the last executions caused
		after := snapshot(b, server, template)
		if got := childPids(server); len(got) != 2 || !slices.Contains(got, template) {
			b.Fatalf("the template changed during the run: %v, was %d", got, template)
		}
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(len(lat)) }
		srv := per(after.server.self - before.server.self)
		tpl := per(after.template.self - before.template.self)
		keepers, programs := keeperDelta(before, after)
		kid := per(after.template.children - before.template.children + keepers.self)
		prog := per(programs.self)
		kern := per(kernelDelta(before.kernel, after.kernel))
		busy := per(after.busy - before.busy)
		idle := float64((after.idle - before.idle).Microseconds()) / 1000 / wall.Seconds() / 10 // % of one CPU
		floorParent, floorChild, floorFaults := forkFloor(b, python, 300)
		spawn := bareSpawn(b, python, 100)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		total := srv + tpl + kid + prog + kern
		floor := ms(floorParent + floorChild)

		b.ReportMetric(float64(len(lat))/wall.Seconds(), "exec/s")
		b.ReportMetric(srv, "server-ms/exec")
		b.ReportMetric(tpl, "template-ms/exec")
		b.ReportMetric(kid, "keepers-ms/exec")
		b.ReportMetric(prog, "programs-ms/exec")
		b.ReportMetric(kern, "kthreads-ms/exec")
		b.ReportMetric(total, "total-ms/exec")
		b.ReportMetric(busy, "machine-busy-ms/exec")
		b.ReportMetric(per(after.server.children-before.server.children), "server-reaped-ms/exec")
		faults := func(a, b int64) float64 { return float64(a-b) / float64(len(lat)) }
		b.ReportMetric(faults(after.template.minflt, before.template.minflt), "template-minflt/exec")
		b.ReportMetric(faults(after.template.childMinflt+keepers.minflt, before.template.childMinflt), "keeper-minflt/exec")
		b.ReportMetric(faults(programs.minflt, 0), "program-minflt/exec")
		b.ReportMetric(floorFaults, "fork-floor-child-minflt")
		b.ReportMetric(floor, "fork-floor-ms")
		b.ReportMetric(ms(spawn), "bare-spawn-ms")
		b.ReportMetric(total/floor, "vs-floor-x")
		b.Logf("%d executions, %.0f/s; CPU per execution: server %.2f, template %.2f, keepers %.2f, programs %.2f, kernel threads %.2f = %.2f ms "+
			"(whole machine %.2f ms, idle %.0f %% of one CPU); fork floor %.2f ms (parent %.2f, child %.2f); bare spawn %.2f ms",
			len(lat), float64(len(lat))/wall.Seconds(), srv, tpl, kid, prog, kern, total, busy, idle,
			floor, ms(floorParent), ms(floorChild), ms(spawn))
	}
}
