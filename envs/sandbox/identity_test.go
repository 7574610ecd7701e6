package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// readFilesCode prints, for each path in argv, its content or the errno of
// opening it.
const readFilesCode = `
import json, sys
res = {}
for p in sys.argv[1:]:
    try:
        with open(p) as f:
            res[p] = f.read()
    except OSError as e:
        res[p] = e.errno
print(json.dumps(res))
`

// TestRootOnlyFilesUnreadable proves a root host's program is judged by the
// kernel as nobody: a 0600 root file in a directory the sandbox can see is
// EACCES inside, while a 0644 file next to it (the control: the path is
// visible, only its owner's bits stand in the way) and the host can read
// both. On the old mapping (the program's uid mapped to the host's root)
// the secret was readable.
func TestRootOnlyFilesUnreadable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret, public := filepath.Join(dir, "secret.key"), filepath.Join(dir, "public.txt")
	if err := os.WriteFile(secret, []byte("s3cr3t"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(public, []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "s3cr3t" {
		t.Fatalf("control: the host cannot read its own file: %v", err)
	}
	// Landlock relaxed too: the uid alone must hold.
	for _, relax := range []Relax{{}, {Landlock: true}} {
		t.Run(fmt.Sprintf("landlock=%v", !relax.Landlock), func(t *testing.T) {
			needLayers(t, relax)
			spec := pySpec(t, readFilesCode, secret, public)
			spec.ReadPaths = append(spec.ReadPaths, dir)
			spec.Relax = relax
			out, res := pyJSON(t, spec)
			if out[public] != "ok" {
				t.Fatalf("control: %s: got %v, want its content (stderr %s)", public, out[public], res.stderr)
			}
			// An unprivileged host maps the program to its own uid, the
			// file's owner (the only mapping it may write).
			want := any(float64(unix.EACCES))
			if os.Geteuid() != 0 {
				want = "s3cr3t"
			}
			if out[secret] != want {
				t.Errorf("%s: got %v, want %v", secret, out[secret], want)
			}
		})
	}
}

// TestProgramHostUID proves the program's processes run as nobody on the
// host when the host is root (as the host's own uid otherwise), read from
// the host's /proc.
func TestProgramHostUID(t *testing.T) {
	t.Parallel()
	needLayers(t, Relax{})
	marker := newMarker()
	spec := pySpec(t, "import sys, time; print('up', flush=True); time.sleep(60)", marker)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	spec.Stdout = w
	p := start(t, spec)
	w.Close()
	defer func() { _ = p.Kill(); waitDone(t, p) }()
	newLineReader(r).waitFor(t, "up")
	pids := hostProcsWith(marker)
	if len(pids) != 1 {
		t.Fatalf("found %v processes with the marker, want the program alone", pids)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pids[0]))
	if err != nil {
		t.Fatal(err)
	}
	want, probed := os.Geteuid(), os.Geteuid()
	if want == 0 {
		// A uid of its own, from the range.
		want, probed = p.Layers().UID, -1
		if r := CurrentIDRange(); want < r.First || want >= r.First+r.Count {
			t.Errorf("layers uid %d, want one of the range %+v", want, r)
		}
	}
	for line := range strings.Lines(string(status)) {
		if k, v, _ := strings.Cut(line, ":"); k == "Uid" || k == "Gid" {
			if f := strings.Fields(v); len(f) != 4 || slices.ContainsFunc(f, func(id string) bool { return id != fmt.Sprint(want) }) {
				t.Errorf("%s: %s, want %d throughout", k, strings.TrimSpace(v), want)
			}
		}
	}
	if Probe().SandboxUID != probed {
		t.Errorf("probe reports uid %d, want %d", Probe().SandboxUID, probed)
	}
}

// TestProcShowsOnlyTheSandbox proves the sandbox's /proc holds its own
// processes and nothing host-global: the root-only files the host can read
// (the control) are not there, and /proc/self/cgroup names no host cgroup.
func TestProcShowsOnlyTheSandbox(t *testing.T) {
	t.Parallel()
	needLayers(t, Relax{})
	rootOnly := []string{"/proc/slabinfo", "/proc/vmallocinfo", "/proc/timer_list", "/proc/pagetypeinfo",
		"/proc/kpageflags", "/proc/kpagecount", "/proc/keys", "/proc/sysrq-trigger", "/proc/kallsyms"}
	if os.Geteuid() == 0 {
		if _, err := os.ReadFile("/proc/slabinfo"); err != nil {
			t.Fatalf("control: the host cannot read /proc/slabinfo: %v", err)
		}
	}
	const code = `
import json, os, sys
res = {"pids": sorted(int(e) for e in os.listdir("/proc") if e.isdigit()), "self": os.getpid()}
for p in sys.argv[1:] + ["/proc/self/cgroup"]:
    try:
        with open(p, "rb") as f:
            res[p] = f.read(4096).decode()
    except OSError as e:
        res[p] = e.errno
print(json.dumps(res))
`
	out, res := pyJSON(t, pySpec(t, code, rootOnly...))
	if pids := out["pids"].([]any); len(pids) != 1 || pids[0] != out["self"] {
		t.Errorf("/proc lists %v, want only the program itself (%v): the init is hidden", pids, out["self"])
	}
	want := float64(unix.ENOENT)
	if !Probe().ProcSubset {
		t.Logf("the kernel refused procfs subset=pid: only permissions stand in the way")
		want = float64(unix.EACCES)
	}
	for _, p := range rootOnly {
		if v, ok := out[p].(float64); !ok || (v != want && v != float64(unix.EACCES)) {
			t.Errorf("%s: got %.40v, want errno %v (stderr %s)", p, out[p], want, res.stderr)
		}
	}
	cg, ok := out["/proc/self/cgroup"].(string)
	if !ok || cg == "" {
		t.Fatalf("/proc/self/cgroup: %v", out["/proc/self/cgroup"])
	}
	for line := range strings.Lines(cg) {
		if !strings.HasSuffix(strings.TrimSpace(line), ":/") {
			t.Errorf("/proc/self/cgroup shows a host path: %q", line)
		}
	}
}
