package sandbox

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkTemplateFork: one child forked, locked down and ready, one
// trivial program run, the child gone; p50 of each phase, and the CPU per
// child of this process (the host's side), the template, its children
// (reaped by it) and the kernel's threads, from /proc/<pid>/stat.
func BenchmarkTemplateFork(b *testing.B) {
	tpl := startTemplate(b, Limits{})
	var ready, ran, gone []time.Duration
	before := cpuNow(b, tpl.Pid())
	for range b.N {
		t0 := time.Now()
		f := fork(b, tpl)
		ready = append(ready, time.Since(t0))
		t1 := time.Now()
		f.run(b, "pass")
		ran = append(ran, time.Since(t1))
		t2 := time.Now()
		_ = f.p.Kill()
		f.p.Wait()
		gone = append(gone, time.Since(t2))
	}
	after := cpuNow(b, tpl.Pid())
	b.ReportMetric(median(ready), "ready-p50-ms")
	b.ReportMetric(median(ran), "run-p50-ms")
	b.ReportMetric(median(gone), "gone-p50-ms")
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
	b.ReportMetric(per(after.host-before.host), "host-cpu-ms/fork")
	b.ReportMetric(per(after.template-before.template), "template-cpu-ms/fork")
	b.ReportMetric(per(after.children-before.children), "children-cpu-ms/fork")
	b.ReportMetric(per(after.kernel-before.kernel), "kthreads-cpu-ms/fork")
	b.ReportMetric(per(after.host+after.template+after.children+after.kernel-
		before.host-before.template-before.children-before.kernel), "total-cpu-ms/fork")
}

// BenchmarkTemplateForkSession: a session's child forked, locked down and
// ready, then gone (a session's creation, less the host's side); p50.
func BenchmarkTemplateForkSession(b *testing.B) {
	tpl := startTemplate(b, Limits{})
	var ready []time.Duration
	for range b.N {
		t0 := time.Now()
		f := forkWith(b, tpl.ForkSession)
		ready = append(ready, time.Since(t0))
		_ = f.p.Kill()
		f.p.Wait()
	}
	b.ReportMetric(median(ready), "ready-p50-ms")
}

// cpuTimes is the CPU used so far by this process, the template (its own
// and its reaped children's) and every kernel thread.
type cpuTimes struct{ host, template, children, kernel time.Duration }

func cpuNow(b *testing.B, template int) cpuTimes {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	c := cpuTimes{host: time.Duration(ru.Utime.Nano() + ru.Stime.Nano())}
	f, err := statFields(template)
	if err != nil {
		b.Fatal(err)
	}
	c.template, c.children = ticks(f[14]+f[15]), ticks(f[16]+f[17])
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if f, err := statFields(pid); err == nil && f[9]&0x00200000 != 0 { // PF_KTHREAD
			c.kernel += ticks(f[14] + f[15])
		}
	}
	return c
}

// statFields are /proc/<pid>/stat's numeric fields by their proc(5)
// number (from 4 on; the state, field 3, is 0).
func statFields(pid int) (map[int]int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: %q", pid, data)
	}
	out := map[int]int64{}
	for k, v := range strings.Fields(string(data[i+1:])) {
		n, _ := strconv.ParseInt(v, 10, 64)
		out[k+3] = n
	}
	return out, nil
}

// ticks converts USER_HZ ticks (100 a second on every Linux architecture).
func ticks(n int64) time.Duration { return time.Duration(n) * 10 * time.Millisecond }

// median in milliseconds.
func median(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}
