package sandbox

import (
	"encoding/json"
	"strings"
	"testing"
)

// isolationProperty is one property docs/sandbox.md promises of every
// program, whichever way its sandbox was made. Its code prints one JSON
// object: {"ok": true} when the property holds, else what broke it.
type isolationProperty struct {
	name, code string
}

// isolationProperties run against a spawned sandbox and a child forked from
// a template, one-shot and a session's (TestIsolationProperties), so the
// implementations, Go for the one and the template's Python for the
// others, cannot drift. The detailed tests of each layer stay in
// isolation_test.go and template_test.go.
var isolationProperties = []isolationProperty{
	{"no network", `
import json, socket
bad = []
for fam in (socket.AF_INET, socket.AF_INET6):
    try:
        s = socket.socket(fam, socket.SOCK_DGRAM)
        s.connect(("127.0.0.1", 53) if fam == socket.AF_INET else ("::1", 53))
        s.send(b"x")
        bad.append(str(fam))
    except OSError:
        pass
try:
    bad += [n for _, n in socket.if_nameindex() if n != "lo"]
except OSError:
    pass  # no netlink to ask: nothing to see either
print(json.dumps({"ok": not bad, "reached": bad}))
`},
	{"host files hidden", `
import json, os
seen = [p for p in ("/etc/shadow", "/etc/passwd", "/root/.bashrc", "/root/.ssh", "/home", "/var/log", "/run", "/sys/fs/cgroup",
                    "/proc/kallsyms", "/proc/sys/kernel")
        if os.path.exists(p)]
print(json.dumps({"ok": not seen, "seen": seen}))
`},
	{"only its own processes", `
import json, os
pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
print(json.dumps({"ok": len(pids) <= 3 and max(pids) < 100, "pids": pids}))
`},
	{"not root, no capabilities, no new privileges", `
import json, os
status = dict(l.split(":", 1) for l in open("/proc/self/status") if ":" in l)
cap = int(status["CapEff"].strip(), 16) | int(status["CapPrm"].strip(), 16)
print(json.dumps({"ok": os.getuid() == 1000 and os.geteuid() == 1000 and cap == 0 and status["NoNewPrivs"].strip() == "1",
                  "uid": os.getuid(), "cap": cap, "nnp": status["NoNewPrivs"].strip()}))
`},
	{"seccomp refuses namespaces, mounts and ptrace", `
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_char_p(a) if isinstance(a, bytes) else ctypes.c_long(a) for a in args])
    return ctypes.get_errno() if r == -1 else 0
allowed = {name: err for name, err in {
    "unshare": sc(272, 0x10000000),
    "mount": sc(165, b"none", b"/tmp", b"tmpfs", 0, 0),
    "ptrace": sc(101, 0, 1, 0, 0),
    "keyctl": sc(250, 0, 0, 0, 0, 0),
    "io_setup": sc(206, 1, 0),
}.items() if err == 0}
print(json.dumps({"ok": not allowed, "allowed": list(allowed)}))
`},
	{"a /tmp that is writable, not executable", `
import json, os, stat
p = "/tmp/prop-exec"
with open(p, "w") as f:
    f.write("#!/bin/sh\nexit 0\n")
os.chmod(p, stat.S_IRWXU)
# access(X_OK) fails on a noexec mount whatever the mode says.
print(json.dumps({"ok": open(p).read().startswith("#!") and not os.access(p, os.X_OK)}))
`},
	{"its own host name and cgroup root", `
import json, os
roots = sorted({l.rstrip("\n").split(":", 2)[2] for l in open("/proc/self/cgroup")})
print(json.dumps({"ok": os.uname().nodename == "sandbox" and roots == ["/"], "host": os.uname().nodename, "cgroups": roots}))
`},
	{"an environment of its own", `
import json, os
leaked = [k for k in os.environ if k.startswith("CYRNEL") or k in ("SSH_AUTH_SOCK", "PGPASSWORD", "AWS_SECRET_ACCESS_KEY")]
print(json.dumps({"ok": not leaked and os.environ.get("HOME") == "/tmp", "leaked": leaked, "home": os.environ.get("HOME")}))
`},
}

// TestIsolationProperties runs every isolation property against both ways a
// sandbox is made. The control: the same code run without any sandbox
// breaks each property (or the table would pass having checked nothing).
func TestIsolationProperties(t *testing.T) {
	t.Parallel()
	needLayers(t, Relax{})
	tpl := startTemplate(t, Limits{})
	verdict := func(t *testing.T, out string) map[string]any {
		t.Helper()
		var v map[string]any
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &v); err != nil {
			t.Fatalf("output %q: %v", out, err)
		}
		return v
	}
	for _, prop := range isolationProperties {
		t.Run(prop.name, func(t *testing.T) {
			t.Run("spawned", func(t *testing.T) {
				out, res := pyJSON(t, pySpec(t, prop.code))
				if out["ok"] != true {
					t.Errorf("broken: %v (stderr %s)", out, res.stderr)
				}
			})
			t.Run("forked", func(t *testing.T) {
				if v := verdict(t, fork(t, tpl).output(t, prop.code)); v["ok"] != true {
					t.Errorf("broken: %v", v)
				}
			})
			t.Run("forked session", func(t *testing.T) {
				res, out := forkWith(t, tpl.ForkSession).sessionRun(t, 1, prop.code)
				if v := verdict(t, out); res["status"] != "success" || v["ok"] != true {
					t.Errorf("broken: %v (%v)", v, res)
				}
			})
			t.Run("control: no sandbox", func(t *testing.T) {
				spec := pySpec(t, prop.code)
				spec.Relax = Relax{Namespaces: true, Landlock: true, Seccomp: true}
				// The environment is never the host's, layers or not: the
				// control gives the program one a leaking sandbox would.
				spec.Env = append(spec.Env, "CYRNEL_API_KEY=leaked")
				out, res := pyJSON(t, spec)
				if out["ok"] == true {
					t.Errorf("holds without any sandbox layer, so this property checks nothing: %v (stderr %s)", out, res.stderr)
				}
			})
		})
	}
}
