package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// keeperLeaveCode leaves what a program could hope to pass on to the next
// one its keeper forks: a module attribute, files in /tmp and /dev/shm (one
// below directories it made unreadable), a socket file, /tmp opened to
// all and given an extended attribute, and a setsid sleeper.
const keeperLeaveCode = `
import builtins, os, socket, time
marker = %[1]q
builtins.secret = marker
open("/tmp/" + marker, "w").write("x")
os.makedirs("/tmp/d/e")
open("/tmp/d/e/f", "w").write("x")
os.chmod("/tmp/d/e", 0)
os.chmod("/tmp/d", 0o100)
open("/dev/shm/" + marker, "w").write("x")
s = socket.socket(socket.AF_UNIX)
s.bind("/tmp/sock")
s.listen()
builtins.kept = s
os.chmod("/tmp", 0o777)
os.setxattr("/tmp", "user.secret", marker.encode())
if os.fork() == 0:
    os.setsid()
    os.closerange(0, 1024)
    time.sleep(1000)
`

// keeperProbeCode prints what a program finds of those.
const keeperProbeCode = `
import builtins, ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
marker = %[1]q
buf = ctypes.create_string_buffer(256)
libc.shmctl(0, 14, buf)  # SHM_INFO
print(json.dumps({
    "file": os.path.exists("/tmp/" + marker), "dir": os.path.exists("/tmp/d"),
    "shm": os.path.exists("/dev/shm/" + marker), "sock": os.path.exists("/tmp/sock"),
    "tmpMode": os.stat("/tmp").st_mode & 0o777, "xattrs": os.listxattr("/tmp"),
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()),
    "secret": getattr(builtins, "secret", None),
    "sysv": ctypes.cast(buf, ctypes.POINTER(ctypes.c_int))[0],
}))
`

type keeperView struct {
	File, Dir, Shm, Sock bool
	TmpMode              int
	Xattrs               []string
	Pids                 []int
	Secret               *string
	SysV                 int
}

func probeKeeper(t *testing.T, f *forked, code, marker string) keeperView {
	t.Helper()
	var v keeperView
	out := f.output(t, fmt.Sprintf(code+keeperProbeCode, marker))
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("probe output %q: %v", out, err)
	}
	return v
}

// A keeper's next program finds nothing of the last: each program is a
// fresh fork of the template's interpreter, and the keeper removes what it
// left in the namespaces they share. A program that leaves a System V IPC
// object, which only its owner may remove, retires its keeper: the next
// program, in another keeper, finds nothing either. The first program's
// own probe shows each of them, so the checks would notice one carried
// over; the keeper's identity shows it was reused.
func TestKeeperCarriesNothing(t *testing.T) {
	t.Parallel()
	tpl := startTemplate(t, Limits{})
	marker := newMarker()
	a := fork(t, tpl)
	k := a.p.keeper
	own := probeKeeper(t, a, keeperLeaveCode, marker)
	if !own.File || !own.Dir || !own.Shm || !own.Sock || own.TmpMode != 0o777 || len(own.Xattrs) != 1 || len(own.Pids) == 0 || own.Secret == nil {
		t.Fatalf("control: the program does not see what it left (%+v): the probe cannot notice a carry-over", own)
	}
	_ = a.p.Kill()
	a.p.Wait()
	// Seen from the host: the keeper alone is left in its cgroups (a
	// process /proc would hide from the next program included).
	keeperPid := strconv.Itoa(forkedHostPid(t, k.proc))
	for _, dir := range k.proc.cg.dirs() {
		if b, err := os.ReadFile(dir + "/cgroup.procs"); err != nil || strings.TrimSpace(string(b)) != keeperPid {
			t.Errorf("%s/cgroup.procs holds %q (%v), want the keeper %s alone", dir, b, err, keeperPid)
		}
	}

	b := fork(t, tpl)
	if b.p.keeper != k {
		t.Fatal("the next program was not forked by the same keeper: nothing was reused")
	}
	next := probeKeeper(t, b, "", marker)
	if next.File || next.Dir || next.Shm || next.Sock || next.TmpMode != 0o700 || len(next.Xattrs) > 0 || len(next.Pids) > 0 || next.Secret != nil || next.SysV != 0 {
		t.Errorf("the keeper's next program found the last one's: %+v", next)
	}

	_ = b.p.Kill()
	b.p.Wait()

	s := fork(t, tpl)
	if s.p.keeper != k {
		t.Fatal("the third program was not forked by the same keeper")
	}
	if v := probeKeeper(t, s, "import ctypes; ctypes.CDLL(None).shmget(0, 4096, 0o1600)\n", marker); v.SysV != 1 {
		t.Fatalf("control: %d System V segments after one was made", v.SysV)
	}
	_ = s.p.Kill()
	s.p.Wait() // the keeper said it was spent: retired, never idle again
	last := fork(t, tpl)
	if v := probeKeeper(t, last, "", marker); last.p.keeper == k || v.SysV != 0 {
		t.Errorf("after a System V segment was left: same keeper %v, %d segments", last.p.keeper == k, v.SysV)
	}

	// What a program of the keeper's uid may change of the keeper itself
	// (its rlimits, its nice value), which a later program would inherit,
	// retires it too.
	k = last.p.keeper
	changed := last.run(t, "import os, resource; resource.prlimit(1, resource.RLIMIT_NOFILE, (40, 40)); os.setpriority(os.PRIO_PROCESS, 1, 19)")
	if changed["status"] != "success" {
		t.Fatalf("control: the program could not change its keeper: %v", changed)
	}
	_ = last.p.Kill()
	last.p.Wait()
	after := fork(t, tpl)
	out := after.output(t, "import os, resource; print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], os.getpriority(os.PRIO_PROCESS, 0))")
	if after.p.keeper == k || strings.TrimSpace(out) != "256 0" {
		t.Errorf("after a program changed its keeper: same keeper %v, open files and nice %q, want 256 0", after.p.keeper == k, out)
	}
}

// A template started with Keepers forks them before it returns, idle: the
// first programs are each given one of them (no clone of their own), and
// a keeper that ran a program goes back to the idle ones.
func TestTemplateForksKeepersAhead(t *testing.T) {
	t.Parallel()
	tpl, ahead := startWithKeepersAhead(t, 3)
	if len(ahead) != 3 {
		t.Fatalf("%d keepers idle after the start, want the 3 forked ahead", len(ahead))
	}
	var held []*forked
	for range ahead {
		f := fork(t, tpl)
		if !slices.Contains(ahead, f.p.keeper) {
			t.Fatal("a program was given a keeper forked for it, with keepers forked ahead still idle")
		}
		tpl.mu.Lock()
		runs := f.p.keeper.runs
		tpl.mu.Unlock()
		if runs != 1 {
			t.Errorf("a keeper forked ahead counts %d programs at its first, want 1", runs)
		}
		held = append(held, f)
	}
	for _, f := range held {
		_ = f.p.Kill()
		f.p.Wait()
	}
	if next := fork(t, tpl); !slices.Contains(ahead, next.p.keeper) {
		t.Error("the next program was not given one of the keepers back from their programs")
	}
}

// A keeper forked ahead that dies before its first program (a kill, say)
// is an idle keeper like any other: passed over when it is picked (here),
// or, when it dies between the pick and its run, Fork gives the program to
// another keeper as it does for one back from a program.
func TestDeadKeeperForkedAheadIsPassedOver(t *testing.T) {
	t.Parallel()
	tpl, ahead := startWithKeepersAhead(t, 1)
	if len(ahead) != 1 {
		t.Fatalf("%d keepers idle after the start, want the one forked ahead", len(ahead))
	}
	dead := ahead[0]
	if err := dead.proc.Kill(); err != nil {
		t.Fatal(err)
	}
	<-dead.proc.Done()
	f := fork(t, tpl)
	if f.p.keeper == dead {
		t.Fatal("the program was given the dead keeper")
	}
	if out := f.output(t, "print(6 * 7)"); strings.TrimSpace(out) != "42" {
		t.Errorf("the program on the next keeper printed %q, want 42", out)
	}
}

// startWithKeepersAhead starts a template that forks n keepers ahead and
// returns it with its idle keepers.
func startWithKeepersAhead(t *testing.T, n int) (*Template, []*keeper) {
	t.Helper()
	spec := testTemplateSpec(t, needPython(t), Limits{}, nil)
	spec.Keepers = n
	tpl := startTemplateSpec(t, spec)
	tpl.mu.Lock()
	defer tpl.mu.Unlock()
	return tpl, slices.Clone(tpl.idle)
}
