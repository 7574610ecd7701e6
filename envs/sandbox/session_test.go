package sandbox

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// sessionRun runs code in a session's child (ForkSession) and returns the
// answer's result and what the program printed: a session's stdout
// travels on the protocol, as notifications before the answer.
func (f *forked) sessionRun(t testing.TB, eid int, code string) (map[string]any, string) {
	t.Helper()
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": eid, "method": "execute", "params": map[string]any{"eid": eid, "code": code}})
	if _, err := f.in.Write(append(req, '\n')); err != nil {
		t.Fatalf("send: %v", err)
	}
	var out strings.Builder
	for {
		line, err := f.out.ReadString('\n')
		if err != nil {
			t.Fatalf("no answer: %v (exit %+v)", err, f.p.Wait())
		}
		var msg struct {
			ID     *int           `json:"id"`
			Result map[string]any `json:"result"`
			Method string         `json:"method"`
			Params struct {
				Data string `json:"data"`
			} `json:"params"`
		}
		if json.Unmarshal([]byte(line), &msg) != nil {
			t.Fatalf("unreadable message %q", line)
		}
		if msg.ID != nil {
			return msg.Result, out.String()
		}
		if msg.Method == "stdout" {
			b, err := base64.StdEncoding.DecodeString(msg.Params.Data)
			if err != nil {
				t.Fatalf("stdout notification %q: %v", line, err)
			}
			out.Write(b)
		}
	}
}

// A session's child keeps its globals between executions and learns that
// it serves a session from its fork request alone: nothing in its
// environment says so. Long-lived, it carries no RLIMIT_CPU where a cgroup
// counts its CPU time: the CPU watch holds each execution instead, from the
// last ResetUsage, so four executions of 0.6 s each pass a 1 s limit
// together and a spinning one still ends at it. A one-shot child of the
// same template is the control: RLIMIT_CPU at the limit, a program per
// child.
func TestTemplateSessionChild(t *testing.T) {
	t.Parallel()
	tpl := startTemplate(t, Limits{CPUSeconds: 1})
	probe := `import json, os, resource; print(json.dumps({"cpu": resource.getrlimit(resource.RLIMIT_CPU)[0], "env": sorted(os.environ)}))`
	type facts struct {
		CPU int64    `json:"cpu"`
		Env []string `json:"env"`
	}
	var oneShot facts
	if err := json.Unmarshal([]byte(fork(t, tpl).output(t, probe)), &oneShot); err != nil {
		t.Fatal(err)
	}
	if oneShot.CPU != 1 {
		t.Errorf("control: a one-shot child's RLIMIT_CPU is %d, want 1", oneShot.CPU)
	}

	s := forkWith(t, tpl.ForkSession)
	if res, _ := s.sessionRun(t, 1, "x = 41"); res["status"] != "success" {
		t.Fatalf("x = 41: %v", res)
	}
	res, out := s.sessionRun(t, 2, "print(x + 1)\n"+probe)
	lines := strings.SplitN(strings.TrimSpace(out), "\n", 2)
	if res["status"] != "success" || len(lines) != 2 || lines[0] != "42" {
		t.Fatalf("the session forgot x, or failed: %v %q", res, out)
	}
	var session facts
	if err := json.Unmarshal([]byte(lines[1]), &session); err != nil {
		t.Fatal(err)
	}
	if strings.Join(session.Env, " ") != strings.Join(oneShot.Env, " ") {
		t.Errorf("a session's environment %v differs from a one-shot child's %v", session.Env, oneShot.Env)
	}
	if tpl.Layers().CPU == KindRlimit {
		if session.CPU != 1 {
			t.Errorf("no cgroup counts CPU here, yet a session's RLIMIT_CPU is %d, want 1", session.CPU)
		}
		return
	}
	if session.CPU != -1 {
		t.Errorf("a session's RLIMIT_CPU is %d: it would count the session's whole life", session.CPU)
	}
	spin := "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6:\n    pass"
	for i := range 4 {
		s.p.ResetUsage()
		if res, _ := s.sessionRun(t, 3+i, spin); res["status"] != "success" {
			t.Fatalf("execution %d of 0.6 s CPU under a 1 s limit per execution: %v (exit %+v)", i+1, res, s.p.Wait())
		}
	}
	s.p.ResetUsage()
	req, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 9, "method": "execute", "params": map[string]any{"eid": 9, "code": "while True: pass"}})
	if _, err := s.in.Write(append(req, '\n')); err != nil {
		t.Fatal(err)
	}
	if exit := s.p.Wait(); !exit.CPULimit {
		t.Errorf("a session spinning past its CPU limit: exit %+v, want CPULimit", exit)
	}
}

// orphans makes five processes whose parent ends before them, so they are
// reparented to the namespace's init, waits until they have all ended (the
// pipe's last writer gone), then says how many zombies the program's
// namespace holds once none is left or the given seconds have passed: a
// session's init reaps them as soon as it runs, which on a loaded machine
// can take more than a second; a one-shot child's never does, so its
// control waits briefly.
func orphans(seconds int) string {
	return fmt.Sprintf(orphansCode, seconds)
}

const orphansCode = `
import os, time
r, w = os.pipe()
for _ in range(5):
    pid = os.fork()
    if pid == 0:
        if os.fork() == 0:
            time.sleep(0.05)
        os._exit(0)
    os.waitpid(pid, 0)
os.close(w)
os.read(r, 1)
os.close(r)
def zombies():
    n = 0
    for p in os.listdir("/proc"):
        try:
            n += p.isdigit() and open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            pass  # reaped meanwhile
    return n
deadline = time.monotonic() + %d
while zombies() and time.monotonic() < deadline:
    time.sleep(0.01)
print(zombies())
`

// A session's namespace has an init that reaps what its programs orphan,
// as a spawned sandbox's does: they do not pile up as zombies counted
// against the session's processes limit. The control: a one-shot child,
// whose runtime is PID 1 itself, keeps them (so the probe sees zombies).
func TestTemplateSessionReapsOrphans(t *testing.T) {
	t.Parallel()
	tpl := startTemplate(t, Limits{})
	if out := strings.TrimSpace(fork(t, tpl).output(t, orphans(1))); out != "5" {
		t.Fatalf("control: a one-shot child holds %s zombies, want 5: the probe sees nothing", out)
	}
	s := forkWith(t, tpl.ForkSession)
	for i := range 2 {
		res, out := s.sessionRun(t, 1+i, orphans(30))
		if res["status"] != "success" || strings.TrimSpace(out) != "0" {
			t.Fatalf("execution %d: %v, %q zombies left in the session", i+1, res, out)
		}
	}
}
