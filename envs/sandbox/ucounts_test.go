package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cyrnel/cyrnel/envs/envtest"
)

// hogLimits leave room for every descriptor the hog holds (128 inotify,
// 128 fanotify, ~140 pipe ends, the message queues) under RLIMIT_NOFILE,
// so what stops it is the per-user count, not its own file limit.
var hogLimits = Limits{OpenFiles: 1024}

// needRootHost: the uid of its own per sandbox is a root host's; an
// unprivileged host can map only its own uid, which all its sandboxes
// share (docs/sandbox.md).
func needRootHost(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("an unprivileged host maps every sandbox to its own uid: the per-user counts are that user's")
	}
}

// checkHogReachedLimits is the control: the hog did use up each count of
// its user, so a sibling sharing that user would have failed. It reports
// whether message queues were within the hog's reach.
func checkHogReachedLimits(t *testing.T, hog map[string]any) (mqueues bool) {
	t.Helper()
	problems, mqueues := envtest.HogProblems(hog)
	for _, p := range problems {
		t.Error(p)
	}
	return mqueues
}

// checkProbe: whoever ran the probe got one of everything the hog holds.
func checkProbe(t *testing.T, who string, got map[string]any, mqueues bool) {
	t.Helper()
	for _, p := range envtest.ProbeProblems(got, who == hostWho, mqueues) {
		t.Errorf("%s, while a sibling holds its maximum: %s", who, p)
	}
}

const hostWho = "the host (root)"

// hostProbe runs the probe as a plain process of the host (root), and
// inotify_init1 in the test process itself.
func hostProbe(t *testing.T) {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Errorf("the host (root) cannot make an inotify instance while a sandbox holds its maximum: %v", err)
	} else {
		unix.Close(fd)
	}
	py := needPython(t)
	out, err := exec.Command(py.exe, "-I", "-S", "-c", envtest.KernelCounts+"\nimport json\nprint(json.dumps(probe()))").Output()
	if err != nil {
		t.Fatalf("host probe: %v", err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("host probe output %q: %v", out, err)
	}
	checkProbe(t, hostWho, got, true)
}

// spawnedProbe runs the probe in a new spawned sandbox.
func spawnedProbe(t *testing.T, relax Relax) {
	t.Helper()
	spec := pySpec(t, envtest.KernelCounts+"\nimport json\nprint(json.dumps(probe()))")
	spec.Relax = relax
	out, res := pyJSON(t, spec)
	if res.exit.Code != 0 {
		t.Fatalf("probe: %+v %s", res.exit, res.stderr)
	}
	checkProbe(t, "a spawned sibling", out, false)
}

// TestKernelCountsPerSandboxSpawned: a spawned program that takes all it
// can of every per-user kernel count (inotify and fanotify instances,
// pipe pages, pending signals) and holds it leaves a sibling sandbox and
// the host every one of them. Before each sandbox had a uid of its own
// owning its user namespace, all were charged to root (the namespace's
// owner) or shared nobody: the sibling and the host got EMFILE, EPERM,
// EAGAIN and 8 KiB pipes. With Landlock relaxed too (the second case);
// POSIX message queues seccomp refuses either way.
func TestKernelCountsPerSandboxSpawned(t *testing.T) {
	t.Parallel()
	for _, relax := range []Relax{{}, {Landlock: true}} {
		t.Run(fmt.Sprintf("landlock=%v", !relax.Landlock), func(t *testing.T) {
			t.Parallel()
			needLayers(t, relax)
			needRootHost(t)
			hogHoldsSpawned(t, relax)
		})
	}
}

func hogHoldsSpawned(t *testing.T, relax Relax) {
	spec := pySpec(t, envtest.KernelCounts+"\nimport json, time\nprint(json.dumps(hog()), flush=True)\ntime.sleep(600)\n")
	spec.Limits, spec.Relax = hogLimits, relax
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	spec.Stdout = w
	p := start(t, spec)
	w.Close()
	defer func() { _ = p.Kill(); waitDone(t, p) }()
	var hog map[string]any
	if err := json.Unmarshal([]byte(newLineReader(r).waitFor(t, "{")), &hog); err != nil {
		t.Fatal(err)
	}
	if checkHogReachedLimits(t, hog) {
		t.Error("message queues within the program's reach: seccomp refuses mq_open")
	}
	spawnedProbe(t, relax)
	hostProbe(t)
}

// TestKernelCountsPerSandboxForked: the same for forked children. The hog
// keeps what it took across executions (as a session does): a second
// execution still holds it, and a sibling child, a new spawned sandbox and
// the host are unaffected.
func TestKernelCountsPerSandboxForked(t *testing.T) {
	t.Parallel()
	needRootHost(t)
	tpl := startTemplate(t, hogLimits)
	hogChild := fork(t, tpl)
	// It goes on holding what it took while the others probe.
	hog := hogChild.outputPatch(t, envtest.KernelCounts+"\nimport time\ncyrnel.output(hog())\ntime.sleep(600)", false)
	mqueues := checkHogReachedLimits(t, hog)
	sibling := fork(t, tpl)
	checkProbe(t, "a forked sibling", sibling.outputPatch(t, envtest.KernelCounts+"\ncyrnel.output(probe())", true), mqueues)
	spawnedProbe(t, Relax{})
	hostProbe(t)
}

// outputPatch runs code and returns what it passed to cyrnel.output: once
// the execution has ended successfully, or, without wait, at the first
// output.
func (f *forked) outputPatch(t testing.TB, code string, wait bool) map[string]any {
	t.Helper()
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": "execute", "params": map[string]any{"code": code}})
	if _, err := f.in.Write(append(req, '\n')); err != nil {
		t.Fatalf("send: %v", err)
	}
	out := map[string]any{}
	for {
		line, err := f.out.ReadString('\n')
		if err != nil {
			t.Fatalf("no answer: %v (exit %+v)", err, f.p.Wait())
		}
		var msg struct {
			ID     *int           `json:"id"`
			Method string         `json:"method"`
			Params map[string]any `json:"params"`
			Result map[string]any `json:"result"`
		}
		if json.Unmarshal([]byte(line), &msg) != nil {
			continue
		}
		if msg.Method == "output" {
			patch, _ := msg.Params["patch"].(map[string]any)
			for k, v := range patch {
				out[k] = v
			}
			if !wait {
				return out
			}
		}
		if msg.ID != nil {
			if msg.Result["status"] != "success" {
				t.Fatalf("code failed: %v", msg.Result)
			}
			return out
		}
	}
}

// TestSandboxesNeverShareAUID: live sandboxes, spawned and forked, each
// run as a uid of their own that owns their user namespace; a uid goes
// back to the pool only once its sandbox (for a forked one, its keeper)
// has been reaped.
func TestSandboxesNeverShareAUID(t *testing.T) {
	t.Parallel()
	needLayers(t, Relax{})
	needRootHost(t)
	tpl := startTemplate(t, Limits{})
	seen := map[int]string{}
	note := func(who string, uid int) {
		t.Helper()
		if other, ok := seen[uid]; ok {
			t.Errorf("%s and %s, both alive, share uid %d", who, other, uid)
		}
		seen[uid] = who
		if !currentIDs().held(uid) {
			t.Errorf("%s: uid %d is not marked held while it lives", who, uid)
		}
	}
	var spawned []*Process
	for i := range 3 {
		marker := newMarker()
		spec := pySpec(t, "import sys, time; print('up', flush=True); time.sleep(60)", marker)
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		spec.Stdout = w
		p := start(t, spec)
		w.Close()
		newLineReader(r).waitFor(t, "up")
		r.Close()
		pids := hostProcsWith(marker)
		if len(pids) != 1 {
			t.Fatalf("found %v processes with the marker, want the program alone", pids)
		}
		checkHostIdentity(t, pids[0], p.Layers().UID)
		note(fmt.Sprintf("spawned sandbox %d", i), p.Layers().UID)
		spawned = append(spawned, p)
	}
	for i := range 3 {
		f := fork(t, tpl)
		checkHostIdentity(t, forkedHostPid(t, f.p), f.p.Layers().UID)
		note(fmt.Sprintf("forked child %d", i), f.p.Layers().UID)
		if i == 2 {
			// A keeper's programs, one at a time, run as its uid: given
			// back once the keeper has been reaped, not before.
			uid, k := f.p.Layers().UID, f.p.keeper
			_ = f.p.Kill()
			f.p.Wait()
			if !currentIDs().held(uid) {
				t.Errorf("forked child: uid %d given back while its keeper lives", uid)
			}
			k.retire()
			<-k.proc.Done()
			if currentIDs().held(uid) {
				t.Errorf("forked child: uid %d still held after its keeper was reaped", uid)
			}
		}
	}
	for _, p := range spawned {
		_ = p.Kill()
		waitDone(t, p)
		if currentIDs().held(p.Layers().UID) {
			t.Errorf("spawned sandbox: uid %d still held after it was reaped", p.Layers().UID)
		}
	}
}

// forkedHostPid is the host pid of a forked child's program.
func forkedHostPid(t *testing.T, p *Process) int {
	t.Helper()
	p.mu.Lock()
	pidfd := p.pidfd
	p.mu.Unlock()
	if pidfd < 0 {
		t.Fatal("no pidfd")
	}
	fdinfo, err := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", pidfd))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(fdinfo)) {
		if v, ok := strings.CutPrefix(line, "Pid:"); ok {
			if pid, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return pid
			}
		}
	}
	t.Fatalf("no pid in %s", fdinfo)
	return 0
}

// checkHostIdentity: the process runs as uid (all four uids and gids) on
// the host, uid is one of the range, and uid owns its user namespace
// (NS_GET_OWNER_UID), so the kernel charges what it counts per user to it.
func checkHostIdentity(t *testing.T, pid, uid int) {
	t.Helper()
	if os.Geteuid() == 0 {
		if r := CurrentIDRange(); uid < r.First || uid >= r.First+r.Count {
			t.Errorf("uid %d is not one of the range %+v", uid, r)
		}
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(status)) {
		if k, v, _ := strings.Cut(line, ":"); k == "Uid" || k == "Gid" {
			if f := strings.Fields(v); len(f) != 4 || slices.ContainsFunc(f, func(id string) bool { return id != strconv.Itoa(uid) }) {
				t.Errorf("pid %d %s: %s, want %d throughout", pid, k, strings.TrimSpace(v), uid)
			}
		}
	}
	ns, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "ns", "user"))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	var owner uint32
	const nsGetOwnerUID = 0xb704 // _IO(0xb7, 0x4), linux/nsfs.h
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, ns.Fd(), nsGetOwnerUID, uintptr(unsafe.Pointer(&owner))); e != 0 {
		t.Fatalf("NS_GET_OWNER_UID: %v", e)
	}
	if int(owner) != uid {
		t.Errorf("pid %d: its user namespace belongs to uid %d, want %d", pid, owner, uid)
	}
}

// TestWatchesPerSandbox: a spawned program that adds inotify watches and
// fanotify marks (one per file it makes in its /tmp) up to the per-user
// limits (fs.inotify.max_user_watches, fs.fanotify.max_user_marks; the
// control) and holds them leaves a sibling sandbox and the host able to
// add theirs. Before, all were root's count: ENOSPC for them.
func TestWatchesPerSandbox(t *testing.T) {
	t.Parallel()
	needLayers(t, Relax{})
	needRootHost(t)
	spec := pySpec(t, envtest.KernelCounts+"\nimport json, time\nprint(json.dumps(hog_watches()), flush=True)\ntime.sleep(600)\n")
	// About 200,000 files with their marks: room in memory and time.
	spec.Limits = Limits{MemoryBytes: 1 << 30, CPUSeconds: 300}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	spec.Stdout = w
	p := start(t, spec)
	w.Close()
	defer func() { _ = p.Kill(); waitDone(t, p) }()
	var hog map[string]any
	line := newLineReader(r).waitFor(t, "{")
	if err := json.Unmarshal([]byte(line), &hog); err != nil {
		t.Fatalf("hog %q: %v (exit %+v)", line, err, p.Exit())
	}
	for _, pr := range envtest.WatchHogProblems(hog) {
		t.Error(pr)
	}
	spawnedProbe(t, Relax{})
	hostProbe(t)
}
