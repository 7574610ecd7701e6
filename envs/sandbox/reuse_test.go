package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// leaveBehindCode leaves everything an execution could hope to pass on:
// a module attribute, a /tmp file, a listening abstract socket, a setsid
// sleeper and as many processes as the pids cgroup allows (a refused
// fork), 0.3 s of CPU and 48 MiB held; then it runs the probe on itself,
// which must see its own file, socket and processes.
const leaveBehindCode = `
import builtins, json, os, socket, time
builtins.secret = %[2]q
s = socket.socket(socket.AF_UNIX)
s.bind("\0" + %[1]q)
s.listen()
builtins.kept = s
open("/tmp/" + %[2]q, "w").write("mine" * 1024)
def sleep():
    os.closerange(0, 1024)  # the output ends with the program, not them
    time.sleep(1000)
if os.fork() == 0:
    os.setsid()
    sleep()
try:
    while True:
        if os.fork() == 0:
            sleep()
except OSError:
    pass
t = time.process_time()
while time.process_time() - t < 0.3:
    pass
builtins.held = b"x" * (48 << 20)
`

// probeSecretCode prints whether the interpreter holds the secret a
// module attribute of another execution would carry.
const probeSecretCode = `
import builtins
print("secret:", getattr(builtins, "secret", None))
`

// A child forked ahead of demand holds nothing of an execution that ran
// while it waited, and the next child, which the ended execution's keeper
// forks in the same namespaces and cgroups (keeper.go), finds nothing of
// it either: not its memory, file, socket, processes, CPU time, OOM kill
// or refused fork. Children alive at once have network namespaces of
// their own, not each other's nor the host's. The first execution's own
// probe and report show each of them, so the checks would notice one
// carried over.
func TestTemplateReusedSlotsCarryNothing(t *testing.T) {
	t.Parallel()
	tpl := startTemplate(t, Limits{Procs: 16, MemoryBytes: 128 << 20})
	marker := newMarker()
	name := "cyrnel-reuse-" + marker
	ahead := fork(t, tpl)
	a := fork(t, tpl)
	slot := a.p.cg.dirs()
	nets := map[string]uint64{
		"host":      netNamespace(t, os.Getpid()),
		"ahead":     netNamespace(t, forkedPid(t, ahead.p)),
		"execution": netNamespace(t, forkedPid(t, a.p)),
	}

	var own siblingView
	if err := json.Unmarshal([]byte(a.output(t, fmt.Sprintf(leaveBehindCode, name, marker)+fmt.Sprintf(probeSiblingCode, name, marker))), &own); err != nil {
		t.Fatal(err)
	}
	if !own.File || own.Connect != "connected" || len(own.Pids) < 2 {
		t.Fatalf("control: the execution does not see what it left (%+v): the probe cannot notice a carry-over", own)
	}
	if u := a.p.Usage(); u.CPU < 250*time.Millisecond || u.PeakMemoryBytes < 48<<20 {
		t.Fatalf("control: the execution's usage %+v does not show its CPU and memory", u)
	}
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 2, "method": "execute", "params": map[string]any{"code": "b = [bytes(1 << 20) + b'x' for _ in range(1000)]"}})
	if _, err := a.in.Write(append(req, '\n')); err != nil {
		t.Fatal(err)
	}
	if exit := a.p.Wait(); !exit.MemoryLimit || !exit.ProcLimit {
		t.Fatalf("control: the execution's exit %+v shows no OOM kill or refused fork", exit)
	}

	if out := ahead.output(t, probeSecretCode); strings.TrimSpace(out) != "secret: None" {
		t.Errorf("the child forked ahead holds the execution's data: %q", out)
	}

	b := fork(t, tpl)
	if got := b.p.cg.dirs(); strings.Join(got, " ") != strings.Join(slot, " ") {
		t.Fatalf("the next child got cgroups %v, not the ended execution's %v: nothing was reused", got, slot)
	}
	// The same keeper forked it: its namespaces are the execution's.
	if next := netNamespace(t, forkedPid(t, b.p)); b.p.keeper != a.p.keeper || next != nets["execution"] {
		t.Fatalf("the next child is not the execution's keeper's (network namespace %d, the execution's %d)", next, nets["execution"])
	}
	seen := map[uint64]string{}
	for who, ns := range nets {
		if other, ok := seen[ns]; ok {
			t.Errorf("the %s and the %s share network namespace %d", who, other, ns)
		}
		seen[ns] = who
	}
	out := b.output(t, fmt.Sprintf(probeSiblingCode+probeSecretCode, name, marker))
	probe, secret, _ := strings.Cut(out, "\n")
	var view siblingView
	if err := json.Unmarshal([]byte(probe), &view); err != nil {
		t.Fatalf("probe output %q: %v", out, err)
	}
	if view.File || view.Connect == "connected" || len(view.Pids) > 0 || strings.TrimSpace(secret) != "secret: None" {
		t.Errorf("the child on reused cgroups saw the ended execution: %+v, %q", view, secret)
	}
	if u := b.p.Usage(); u.CPU >= 250*time.Millisecond || u.PeakMemoryBytes >= 48<<20 {
		t.Errorf("the child on reused cgroups starts with the ended execution's usage: %+v", u)
	}
	_ = b.p.Kill()
	if exit := b.p.Wait(); exit.MemoryLimit || exit.ProcLimit {
		t.Errorf("the child on reused cgroups inherited the counters: %+v", exit)
	}
}

// netNamespace is the inode of pid's network namespace, held open until
// the test ends: a namespace freed meanwhile could give its number to a
// later one.
func netNamespace(t *testing.T, pid int) uint64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	fi, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// forkedPid is the host pid of a forked child, from its pidfd's fdinfo
// (the template reports the pid of its own PID namespace).
func forkedPid(t *testing.T, p *Process) int {
	t.Helper()
	p.mu.Lock()
	fd := p.pidfd
	p.mu.Unlock()
	info, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(info), "\n") {
		if v, ok := strings.CutPrefix(l, "Pid:"); ok {
			if pid, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && pid > 0 {
				return pid
			}
		}
	}
	t.Fatalf("no pid in the pidfd's fdinfo %q", info)
	return 0
}
