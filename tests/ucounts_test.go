package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cyrnel/cyrnel/envs/envtest"
)

// TestOneSandboxCannotExhaustPerUserCounts (issue 22, item 4), against the
// built binary on its defaults: a session takes its maximum of every count
// the kernel keeps per user (inotify and fanotify instances, pipe pages,
// pending signals) and still holds it in its next execution; meanwhile a
// new process (a forked child), a new session (a spawned interpreter) and
// the host (root) each get one of everything, and nobody can take Linux
// AIO contexts, whose count is the whole host's. Before each sandbox had a
// uid of its own owning its user namespace, all of them (and root) shared
// the counts: EMFILE, EPERM, EAGAIN and 8 KiB pipes for everyone else.
func TestOneSandboxCannotExhaustPerUserCounts(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("a root host's defence: an unprivileged host's sandboxes all run as its own uid")
	}
	h := start(t, "")
	// Room for every descriptor the hog holds: what stops it must be the
	// per-user count, not its own file limit.
	if st, _ := h.do("PUT", "/modules/python/config", map[string]any{"limits": map[string]any{"openFiles": 1024}}, nil); st != 200 {
		t.Fatalf("set openFiles: status %d", st)
	}
	s := h.newSession(map[string]any{})
	p := h.run(envtest.KernelCounts+"\ncyrnel.output(hog())", session(s.ID))
	if p.exit() != "success" {
		t.Fatalf("hog: %s/%s %s %s", p.exit(), p.reason(), p.Error, p.Stderr)
	}
	problems, mqueues := envtest.HogProblems(p.Output)
	for _, pr := range problems {
		t.Errorf("control: %s", pr)
	}
	p = h.run(`cyrnel.output({"held": len(_held)})`, session(s.ID))
	if held, _ := p.Output["held"].(float64); p.exit() != "success" || held < 256 {
		t.Fatalf("the session's next execution: %s/%s, holds %v descriptors; want those the first took (%s)", p.exit(), p.reason(), p.Output, p.Stderr)
	}
	probe := envtest.KernelCounts + "\ncyrnel.output(probe())"
	for _, c := range []struct {
		who   string
		extra map[string]any
	}{{"a new process", nil}, {"a new session", session(h.newSession(map[string]any{}).ID)}} {
		p := h.run(probe, c.extra)
		if p.exit() != "success" {
			t.Fatalf("%s: %s/%s %s %s", c.who, p.exit(), p.reason(), p.Error, p.Stderr)
		}
		for _, pr := range envtest.ProbeProblems(p.Output, false, mqueues) {
			t.Errorf("%s, while a session holds its maximum: %s", c.who, pr)
		}
	}
	if fd, err := unix.InotifyInit1(unix.IN_CLOEXEC); err != nil {
		t.Errorf("the host (root): inotify_init1 while a session holds its maximum: %v", err)
	} else {
		unix.Close(fd)
	}
	out, err := exec.Command("python3", "-I", "-S", "-c", envtest.KernelCounts+"\nimport json\nprint(json.dumps(probe()))").Output()
	if err != nil {
		t.Fatalf("host probe: %v", err)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("host probe %q: %v", out, err)
	}
	for _, pr := range envtest.ProbeProblems(got, true, true) {
		t.Errorf("the host (root), while a session holds its maximum: %s", pr)
	}
}

// TestSandboxUIDsSetting: CYRNEL_SANDBOX_UIDS sets the range the programs'
// uids come from (GET /environment says which, a program's processes run
// as one of it on the host); a range the server cannot use stops it,
// naming the setting.
func TestSandboxUIDsSetting(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("a root host's setting: an unprivileged host's sandboxes all run as its own uid")
	}
	out, err := exec.Command(binary, "serve", "--addr", "127.0.0.1:0", "--data-dir", t.TempDir(), "--sandbox-uids", "1000:10").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--sandbox-uids (CYRNEL_SANDBOX_UIDS)") || !strings.Contains(string(out), "above 65535") {
		t.Errorf("serve with the range 1000:10: %v, %s; want a refusal naming the setting", err, out)
	}
	const first, count = 2000000000, 64
	h := start(t, "", fmt.Sprintf("CYRNEL_SANDBOX_UIDS=%d:%d", first, count))
	var env struct {
		Active struct {
			Status struct {
				Sandbox struct {
					Layers struct {
						UIDs *struct{ First, Count int } `json:"uids"`
					} `json:"layers"`
				} `json:"sandbox"`
			} `json:"status"`
		} `json:"active"`
	}
	h.do("GET", "/environment", nil, &env)
	if u := env.Active.Status.Sandbox.Layers.UIDs; u == nil || u.First != first || u.Count != count {
		t.Errorf("GET /environment uids %+v, want %d:%d", u, first, count)
	}
	p := h.run(`
import os
cyrnel.output({"uid": int(open("/proc/self/uid_map").read().split()[1])})`, nil)
	if uid, _ := p.Output["uid"].(float64); p.exit() != "success" || uid < first || uid >= first+count {
		t.Errorf("the program's host uid: %v (%s/%s %s), want one of %d:%d", p.Output, p.exit(), p.reason(), p.Stderr, first, count)
	}
}
