package tests

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cyrnel/cyrnel/envs/sandbox"
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
// forks n children each running `pass`, and returns the CPU per fork: the
// parent's own from getrusage(RUSAGE_SELF) after its set-up, plus its
// children's from getrusage(RUSAGE_CHILDREN), and the minor page faults of
// one child. imports is run first (with the site packages on the path);
// "" runs the parent with -S.
func forkFloor(b *testing.B, python, imports string, n int) (parent, child time.Duration, childFaults float64) {
	script := imports + `
import gc, os, resource, sys
gc.freeze()
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
	args := []string{"-I"}
	if imports == "" {
		args = append(args, "-S")
	}
	out, err := exec.Command(python, append(args, "-c", script, strconv.Itoa(n))...).Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			b.Fatalf("fork floor: %v: %s", err, exit.Stderr)
		}
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

// cpuSplit is the CPU per execution of a run, by process, in ms, and the
// minor page faults per execution of each.
type cpuSplit struct {
	rate                                     float64 // executions a second
	server, template, keepers, programs      float64
	kthreads, busy, idle, reaped             float64 // idle: % of one CPU
	templateFaults, keeperFaults, progFaults float64
	executions                               int
}

// total is what the server, the template, its children and kernel threads
// used.
func (c cpuSplit) total() float64 {
	return c.server + c.template + c.keepers + c.programs + c.kthreads
}

// forkSide is what forking used: the keepers (their forks and clean-up),
// the programs (their set-up, the program, their exits) and kernel
// threads. The server's share is not in it: it handles the same requests
// whatever the template holds (BenchmarkForkCostPandas reports it beside).
func (c cpuSplit) forkSide() float64 { return c.keepers + c.programs + c.kthreads }

// measureSplit runs n executions of code at 8 clients on h, whose server is
// the process server and whose pool forks from template, and splits their
// CPU by process (BenchmarkCPUSplit's doc comment says how).
func measureSplit(b *testing.B, h *host, server, template, n int, code string) cpuSplit {
	waitPoolFull(b, h)
	before := snapshot(b, server, template)
	lat, wall := load(b, h, n, 8, code)
	waitPoolFull(b, h) // the refills the last executions caused
	after := snapshot(b, server, template)
	if got := childPids(server); !slices.Contains(got, template) {
		b.Fatalf("the template changed during the run: %v, was %d", got, template)
	}
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(len(lat)) }
	faults := func(a, b int64) float64 { return float64(a-b) / float64(len(lat)) }
	keepers, programs := keeperDelta(before, after)
	return cpuSplit{
		rate:           float64(len(lat)) / wall.Seconds(),
		server:         per(after.server.self - before.server.self),
		template:       per(after.template.self - before.template.self),
		keepers:        per(after.template.children - before.template.children + keepers.self),
		programs:       per(programs.self),
		kthreads:       per(kernelDelta(before.kernel, after.kernel)),
		busy:           per(after.busy - before.busy),
		idle:           float64((after.idle - before.idle).Microseconds()) / 1000 / wall.Seconds() / 10,
		reaped:         per(after.server.children - before.server.children),
		templateFaults: faults(after.template.minflt, before.template.minflt),
		keeperFaults:   faults(after.template.childMinflt+keepers.minflt, before.template.childMinflt),
		progFaults:     faults(programs.minflt, 0),
		executions:     len(lat),
	}
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
		c := measureSplit(b, h, server, template, n, "pass")
		floorParent, floorChild, floorFaults := forkFloor(b, python, "", 300)
		spawn := bareSpawn(b, python, 100)
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		floor := ms(floorParent + floorChild)

		b.ReportMetric(c.rate, "exec/s")
		b.ReportMetric(c.server, "server-ms/exec")
		b.ReportMetric(c.template, "template-ms/exec")
		b.ReportMetric(c.keepers, "keepers-ms/exec")
		b.ReportMetric(c.programs, "programs-ms/exec")
		b.ReportMetric(c.kthreads, "kthreads-ms/exec")
		b.ReportMetric(c.total(), "total-ms/exec")
		b.ReportMetric(c.busy, "machine-busy-ms/exec")
		b.ReportMetric(c.reaped, "server-reaped-ms/exec")
		b.ReportMetric(c.templateFaults, "template-minflt/exec")
		b.ReportMetric(c.keeperFaults, "keeper-minflt/exec")
		b.ReportMetric(c.progFaults, "program-minflt/exec")
		b.ReportMetric(floorFaults, "fork-floor-child-minflt")
		b.ReportMetric(floor, "fork-floor-ms")
		b.ReportMetric(ms(spawn), "bare-spawn-ms")
		b.ReportMetric(c.total()/floor, "vs-floor-x")
		b.Logf("%d executions, %.0f/s; CPU per execution: server %.2f, template %.2f, keepers %.2f, programs %.2f, kernel threads %.2f = %.2f ms "+
			"(whole machine %.2f ms, idle %.0f %% of one CPU); fork floor %.2f ms (parent %.2f, child %.2f); bare spawn %.2f ms; 64 kB folios %s",
			c.executions, c.rate, c.server, c.template, c.keepers, c.programs, c.kthreads, c.total(), c.busy, c.idle,
			floor, ms(floorParent), ms(floorChild), ms(spawn), sandbox.FolioSetting())
	}
}

// BenchmarkForkCostPandas: what a fresh `pass` costs to fork from a template
// with pandas preloaded against one with the default preload, in the same
// run: the CPU of forking (keepers, programs, kernel threads; measureSplit)
// at 8 clients, in 3 alternating pairs of runs on two servers, and the
// fork floors of a bare parent with and without pandas imported. Run with
// -benchtime 1x; CYRNEL_CPUSPLIT_N sets the executions of each run (600).
func BenchmarkForkCostPandas(b *testing.B) {
	n := 600
	if v, err := strconv.Atoi(os.Getenv("CYRNEL_CPUSPLIT_N")); err == nil && v > 0 {
		n = v
	}
	// Both servers on the same interpreter: builds differ in what a fork
	// costs (the one on PATH may not be Debian's, which has pandas).
	system := dataSciencePython(b)
	def := start(b, "", "CYRNEL_PYTHON="+system)
	setPython(b, def, map[string]any{"interpreter": system, "fork": true})
	defKids := childPids(def.cmd.Process.Pid)
	defTemplate := slices.IndexFunc(defKids, func(pid int) bool { return !preloadsAsyncio(pid) })
	if len(defKids) != 2 || !slices.ContainsFunc(defKids, preloadsAsyncio) || defTemplate < 0 {
		b.Fatalf("the default server's children are %v, want the two templates", defKids)
	}
	pd := start(b, "", "CYRNEL_PYTHON="+system)
	setPython(b, pd, map[string]any{"interpreter": system, "preload": []string{"pandas"}, "fork": true, "startTimeoutMs": 120000})
	pdKids := childPids(pd.cmd.Process.Pid)
	if len(pdKids) != 1 {
		b.Fatalf("the pandas server's children are %v, want its template", pdKids)
	}
	load(b, def, 50, 8, "pass")
	load(b, pd, 50, 8, "pass")
	for range b.N {
		var defSide, pdSide, ratios, defServer, pdServer []float64
		var last [2]cpuSplit
		for i := range 3 {
			sides := []func(){
				func() { last[0] = measureSplit(b, def, def.cmd.Process.Pid, defKids[defTemplate], n, "pass") },
				func() { last[1] = measureSplit(b, pd, pd.cmd.Process.Pid, pdKids[0], n, "pass") },
			}
			sides[i%2]() // which goes first alternates too
			sides[1-i%2]()
			defSide = append(defSide, last[0].forkSide())
			pdSide = append(pdSide, last[1].forkSide())
			ratios = append(ratios, last[1].forkSide()/last[0].forkSide())
			defServer = append(defServer, last[0].server)
			pdServer = append(pdServer, last[1].server)
		}
		ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
		dp, dc, _ := forkFloor(b, system, "", 300)
		pp, pc, pf := forkFloor(b, system, "import pandas", 300)
		b.ReportMetric(median(defSide), "default-fork-ms/exec")
		b.ReportMetric(median(pdSide), "pandas-fork-ms/exec")
		b.ReportMetric(median(ratios), "pandas-vs-default-x")
		b.ReportMetric(median(defServer), "default-server-ms/exec")
		b.ReportMetric(median(pdServer), "pandas-server-ms/exec")
		b.ReportMetric(ms(dp+dc), "fork-floor-ms")
		b.ReportMetric(ms(pp+pc), "pandas-fork-floor-ms")
		b.ReportMetric(pf, "pandas-fork-floor-child-minflt")
		b.Logf("forking a pass, CPU per execution (keepers + programs + kernel threads): default %.2f ms, pandas %.2f ms (pairs %.2f); "+
			"last pair, pandas: keepers %.2f, programs %.2f, kernel threads %.2f ms, program faults %.0f, server %.2f ms; "+
			"default: keepers %.2f, programs %.2f, kernel threads %.2f ms, program faults %.0f, server %.2f ms; "+
			"bare fork floor: %.2f ms, with pandas imported %.2f ms (parent %.2f, child %.2f); 64 kB folios %s",
			median(defSide), median(pdSide), ratios,
			last[1].keepers, last[1].programs, last[1].kthreads, last[1].progFaults, last[1].server,
			last[0].keepers, last[0].programs, last[0].kthreads, last[0].progFaults, last[0].server,
			ms(dp+dc), ms(pp+pc), ms(pp), ms(pc), sandbox.FolioSetting())
	}
}
