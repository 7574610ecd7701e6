package sandbox

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestProbe(t *testing.T) {
	t.Parallel()
	s := Probe()
	b, _ := json.MarshalIndent(s, "", "  ")
	t.Logf("probe: %s", b)
	l, _ := json.Marshal(s.Layers(Relax{}))
	t.Logf("default layers: %s", l)
	if err := s.Check(Relax{}); err != nil {
		t.Logf("check: %v", err)
	}
	if s.namespaces(false) && s.NamespacesErr != "" {
		t.Errorf("namespaces reported both available and failing: %s", s.NamespacesErr)
	}
	// Relaxing every layer must always pass the check.
	if err := s.Check(Relax{Namespaces: true, Landlock: true, Seccomp: true, Cgroups: true}); err != nil {
		t.Errorf("fully relaxed check failed: %v", err)
	}
}

// TestNetworkDenied proves a program cannot reach a TCP or UDP listener on
// the host's loopback, with all layers and with each layer alone, and that
// the Network toggle really opens it (so the test can see a leak).
func TestNetworkDenied(t *testing.T) {
	t.Parallel()
	tcp, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	const code = `
import json, socket, sys
res = {}
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10).close()
    res["tcp"] = "connected"
except OSError as e:
    res["tcp"] = e.errno
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b"leak", ("127.0.0.1", int(sys.argv[2])))
    res["udp"] = "sent"
except OSError as e:
    res["udp"] = e.errno
print(json.dumps(res))
`
	udpByLandlock := any("sent") // Landlock restricts UDP from ABI 10 on
	if Probe().LandlockABI >= 10 {
		udpByLandlock = float64(unix.EACCES)
	}
	eperm, unreach, eacces := float64(unix.EPERM), float64(unix.ENETUNREACH), float64(unix.EACCES)
	cases := []struct {
		name     string
		relax    Relax
		tcp, udp any
	}{
		{"all layers", Relax{}, eperm, eperm},
		{"network namespace alone", Relax{Landlock: true, Seccomp: true}, unreach, unreach},
		{"seccomp alone", Relax{Namespaces: true, Landlock: true}, eperm, eperm},
		{"landlock alone", Relax{Namespaces: true, Seccomp: true}, eacces, udpByLandlock},
		{"network allowed", Relax{Network: true}, "connected", "sent"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			needLayers(t, c.relax)
			spec := pySpec(t, code, port(tcp.Addr()), port(udp.LocalAddr()))
			spec.Relax = c.relax
			out, res := pyJSON(t, spec)
			if out["tcp"] != c.tcp || out["udp"] != c.udp {
				t.Errorf("got tcp=%v udp=%v, want tcp=%v udp=%v (stderr %s)", out["tcp"], out["udp"], c.tcp, c.udp, res.stderr)
			}
			// Whatever the program saw, the host side must agree: a
			// loopback connect or datagram is queued before the
			// program's call returns, so none pending means none came.
			gotConn, gotDgram := drainTCP(t, tcp), drainUDP(t, udp)
			if wantConn := c.tcp == "connected"; gotConn != wantConn {
				t.Errorf("listener got a connection: %v, want %v", gotConn, wantConn)
			}
			if wantDgram := c.udp == "sent"; gotDgram != wantDgram {
				t.Errorf("UDP socket got a datagram: %v, want %v", gotDgram, wantDgram)
			}
		})
	}
}

func port(a net.Addr) string {
	_, p, _ := net.SplitHostPort(a.String())
	return p
}

// drainTCP accepts (without waiting) every pending connection.
func drainTCP(t *testing.T, l net.Listener) bool {
	rc, err := l.(*net.TCPListener).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	got := false
	for {
		var nfd int
		var aerr error
		if err := rc.Control(func(fd uintptr) {
			nfd, _, aerr = unix.Accept4(int(fd), unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK)
		}); err != nil {
			t.Fatal(err)
		}
		if aerr != nil {
			return got
		}
		got = true
		_ = unix.Close(nfd)
	}
}

// drainUDP reads (without waiting) every pending datagram.
func drainUDP(t *testing.T, c net.PacketConn) bool {
	rc, err := c.(*net.UDPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	got := false
	buf := make([]byte, 64)
	for {
		var rerr error
		if err := rc.Control(func(fd uintptr) {
			_, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
		}); err != nil {
			t.Fatal(err)
		}
		if rerr != nil {
			return got
		}
		got = true
	}
}

// TestHostFilesHidden proves a program cannot read a secret in a host
// directory standing for the data directory, home directories, the working
// tree or host configuration, with all layers and with the private root and
// Landlock each alone, while it can read what it was given.
func TestHostFilesHidden(t *testing.T) {
	t.Parallel()
	dataDir := t.TempDir()
	secret := filepath.Join(dataDir, "secrets.key")
	if err := os.WriteFile(secret, []byte("s3cr3t"), 0o600); err != nil {
		t.Fatal(err)
	}
	given := t.TempDir()
	readable := filepath.Join(given, "readable.txt")
	if err := os.WriteFile(readable, []byte("ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	home, _ := os.UserHomeDir()
	// The home directory itself may exist in the sandbox, on the way to
	// the interpreter (pyenv); its files may not.
	hidden := []string{secret, dataDir, wd, filepath.Join(wd, "sandbox_test.go"), filepath.Join(home, ".bashrc"),
		"/etc/shadow", "/etc/passwd", "/sys/fs/cgroup", "/run", "/var/log"}
	const code = `
import json, os, sys
res = {}
for p in sys.argv[1:]:
    try:
        if os.path.isdir(p):
            res[p] = "listed %d" % len(os.listdir(p))
        else:
            with open(p) as f:
                res[p] = f.read()
    except OSError as e:
        res[p] = e.errno
print(json.dumps(res))
`
	cases := []struct {
		name  string
		relax Relax
		leaks bool
	}{
		{"all layers", Relax{}, false},
		{"private root alone", Relax{Landlock: true, Seccomp: true}, false},
		{"landlock alone", Relax{Namespaces: true, Seccomp: true}, false},
		{"control: nothing but limits", Relax{Namespaces: true, Landlock: true, Seccomp: true}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			needLayers(t, c.relax)
			spec := pySpec(t, code, append([]string{readable}, hidden...)...)
			spec.ReadPaths = append(spec.ReadPaths, given)
			spec.Relax = c.relax
			out, res := pyJSON(t, spec)
			if out[readable] != "ok" {
				t.Errorf("given file: got %v, want its content", out[readable])
			}
			if c.leaks {
				if out[secret] != "s3cr3t" {
					t.Errorf("control: secret not readable without layers (%v); the test cannot see leaks", out[secret])
				}
				return
			}
			for _, p := range hidden {
				if v, ok := out[p].(float64); !ok || (v != float64(unix.ENOENT) && v != float64(unix.EACCES)) {
					t.Errorf("%s: got %v, want ENOENT or EACCES (stderr %s)", p, out[p], res.stderr)
				}
			}
		})
	}
}

// TestHostProcessesInvisible proves a program sees only its sandbox's
// processes in /proc and can signal neither host processes nor its init.
func TestHostProcessesInvisible(t *testing.T) {
	t.Parallel()
	const code = `
import json, os, signal, sys
res = {"pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()), "cmd": {}}
for p in res["pids"]:
    try:
        with open("/proc/%d/cmdline" % p, "rb") as f:
            res["cmd"][str(p)] = f.read().split(b"\0")[0].decode()
    except OSError as e:
        res["cmd"][str(p)] = "errno %d" % e.errno
for name, pid, sig in (("host", int(sys.argv[1]), signal.SIGTERM), ("init", 1, signal.SIGKILL)):
    try:
        os.kill(pid, sig)
        res[name] = "sent"
    except OSError as e:
        res[name] = e.errno
res["alive"] = True
print(json.dumps(res))
`
	for _, relax := range []Relax{{}, {Landlock: true}} {
		t.Run(fmt.Sprintf("landlock=%v", !relax.Landlock), func(t *testing.T) {
			needLayers(t, relax)
			spec := pySpec(t, code, strconv.Itoa(os.Getpid()))
			spec.Relax = relax
			out, res := pyJSON(t, spec)
			if res.exit.Code != 0 || out["alive"] != true {
				t.Fatalf("program did not survive signalling its init: %+v", res.exit)
			}
			for pid, cmd := range out["cmd"].(map[string]any) {
				if cmd != "cyrnel-sandbox-init" && cmd != spec.Argv[0] {
					t.Errorf("sandbox sees pid %s running %v", pid, cmd)
				}
			}
			if out["host"] != float64(unix.ESRCH) {
				t.Errorf("kill(host pid): got %v, want ESRCH", out["host"])
			}
			// The kernel ignores SIGKILL to a PID namespace's init from
			// inside; Landlock (ABI 6+) refuses it outright.
			if out["init"] != "sent" && out["init"] != float64(unix.EPERM) {
				t.Errorf("kill(1): got %v", out["init"])
			}
			t.Logf("visible pids %v, kill(1): %v", out["pids"], out["init"])
		})
	}
}

// TestEnvironmentClean proves neither the program nor its init carries any
// of the host's environment.
func TestEnvironmentClean(t *testing.T) {
	canary := newMarker()
	t.Setenv("CYRNEL_SANDBOX_CANARY", canary)
	const code = `
import json, os
res = {"environ": dict(os.environ)}
for p in ("/proc/self/environ", "/proc/1/environ"):
    try:
        with open(p, "rb") as f:
            res[p] = f.read().decode()
    except OSError as e:
        res[p] = e.errno
print(json.dumps(res))
`
	for _, relax := range []Relax{{}, {Landlock: true}} {
		t.Run(fmt.Sprintf("landlock=%v", !relax.Landlock), func(t *testing.T) {
			needLayers(t, relax)
			spec := pySpec(t, code)
			spec.Env = []string{"CYRNEL_RUNTIME=1", "PATH=/usr/bin"}
			spec.Relax = relax
			out, res := pyJSON(t, spec)
			if strings.Contains(res.stdout, canary) || strings.Contains(res.stderr, canary) {
				t.Fatalf("host environment leaked: %s", res.stdout)
			}
			var keys []string
			for k := range out["environ"].(map[string]any) {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			want := []string{"CYRNEL_RUNTIME", "HOME", "LANG", "PATH", "PYTHONDONTWRITEBYTECODE", "TMPDIR"}
			if !slices.Equal(keys, want) {
				t.Errorf("environment keys %v, want %v", keys, want)
			}
			if env := out["environ"].(map[string]any); env["PATH"] != "/usr/bin" || env["HOME"] != "/tmp" {
				t.Errorf("PATH=%v HOME=%v, want the override and the work dir", env["PATH"], env["HOME"])
			}
			// The init's environment is empty; it runs as another uid
			// (a root host) and /proc hides it (hidepid), or Landlock
			// keeps it from being read (ptrace-scoped).
			if init := out["/proc/1/environ"]; init != "" && init != float64(unix.EACCES) && init != float64(unix.ENOENT) {
				t.Errorf("/proc/1/environ: %v", init)
			}
		})
	}
}

// TestExactlyTheGivenFiles proves the program receives fds 0-4 exactly:
// stdin, stdout, stderr and the two protocol pipes at 3 and 4.
func TestExactlyTheGivenFiles(t *testing.T) {
	t.Parallel()
	needLayers(t, Relax{})
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	const code = `
import os, sys
def is_open(fd):
    try:
        os.fstat(fd)
        return True
    except OSError:
        return False
msg = os.read(3, 100)
os.write(4, msg.upper() + b" " + repr([fd for fd in range(1024) if is_open(fd)]).encode())
sys.stdout.write("stdin:" + sys.stdin.read())
`
	spec := pySpec(t, code)
	spec.Stdin = stdinR
	spec.ExtraFiles = []*os.File{inR, outW}
	var out syncBuffer
	spec.Stdout = &out
	p := start(t, spec)
	closeAll(inR, outW, stdinR) // the sandbox has its copies
	if _, err := inW.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := stdinW.Write([]byte("from stdin")); err != nil {
		t.Fatal(err)
	}
	closeAll(inW, stdinW)
	reply, err := io.ReadAll(outR) // EOF once the program exits: nobody else holds fd 4
	if err != nil {
		t.Fatal(err)
	}
	exit := waitDone(t, p)
	if exit.Code != 0 {
		t.Fatalf("exit %+v", exit)
	}
	if got := string(reply); got != "HELLO [0, 1, 2, 3, 4]" {
		t.Errorf("fd 4 got %q, want HELLO and fds [0, 1, 2, 3, 4]", got)
	}
	if out.String() != "stdin:from stdin" {
		t.Errorf("stdout %q", out.String())
	}
}

// TestSeccompDenies proves the filter refuses ptrace, mount, unshare,
// setns, bpf, keyctl, io_uring, namespace clones and non-AF_UNIX sockets
// with EPERM, clone3 with ENOSYS and i386 system calls, and that these
// refusals come from the filter: with seccomp relaxed the same calls work.
func TestSeccompDenies(t *testing.T) {
	t.Parallel()
	const code = `
import ctypes, json, mmap, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_char_p(a) if isinstance(a, bytes) else ctypes.c_long(a) for a in args])
    if r == 0 and nr == 56:
        os._exit(0)  # the clone child, were it allowed
    return ctypes.get_errno() if r == -1 else 0
CLONE_NEWUSER, SIGCHLD = 0x10000000, 17
res = {
    "ptrace": sc(101, 0, 0, 0, 0),
    "mount": sc(165, b"none", b"/tmp", b"tmpfs", 0, 0),
    "umount2": sc(166, b"/tmp", 0),
    "unshare": sc(272, CLONE_NEWUSER),
    "setns": sc(308, 0, 0),
    "bpf": sc(321, 0, 0, 0),
    "keyctl": sc(250, 0, 0, 0, 0, 0),
    "perf_event_open": sc(298, 0, 0, -1, -1, 0),
    "io_uring_setup": sc(425, 1, 0),
    "clone_newuser": sc(56, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0),
    "clone3": sc(435, 0, 0),
}
try:
    socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
    res["socket_inet"] = 0
except OSError as e:
    res["socket_inet"] = e.errno
socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).close()
res["socket_unix"] = 0
if sys.argv[1] == "i386":
    # mov eax, 20 (i386 getpid); int 0x80; ret
    code = bytes([0xb8, 20, 0, 0, 0, 0xcd, 0x80, 0xc3])
    buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    buf.write(code)
    fn = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))
    res["i386_getpid"] = fn()
with open("/proc/self/status") as f:
    res["status"] = {k: v.strip() for k, v in (l.split(":", 1) for l in f)}
print(json.dumps(res))
`
	i386 := "no"
	if ia32Emulation() {
		i386 = "i386"
	}
	eperm, enosys := float64(unix.EPERM), float64(unix.ENOSYS)
	t.Run("filter", func(t *testing.T) {
		needLayers(t, Relax{})
		out, res := pyJSON(t, pySpec(t, code, i386))
		for _, name := range []string{"ptrace", "mount", "umount2", "unshare", "setns", "bpf", "keyctl",
			"perf_event_open", "io_uring_setup", "clone_newuser", "socket_inet"} {
			if out[name] != eperm {
				t.Errorf("%s: got %v, want EPERM", name, out[name])
			}
		}
		if out["clone3"] != enosys {
			t.Errorf("clone3: got %v, want ENOSYS", out["clone3"])
		}
		if out["socket_unix"] != float64(0) {
			t.Errorf("AF_UNIX socket refused: %v", out["socket_unix"])
		}
		if i386 == "i386" && out["i386_getpid"] != -enosys {
			t.Errorf("i386 getpid through int 0x80: got %v, want -ENOSYS", out["i386_getpid"])
		}
		status := out["status"].(map[string]any)
		if status["Seccomp"] != "2" || status["NoNewPrivs"] != "1" {
			t.Errorf("Seccomp %v NoNewPrivs %v (stderr %s)", status["Seccomp"], status["NoNewPrivs"], res.stderr)
		}
	})
	t.Run("control: seccomp relaxed", func(t *testing.T) {
		relax := Relax{Seccomp: true}
		needLayers(t, relax)
		spec := pySpec(t, code, i386)
		spec.Relax = relax
		out, _ := pyJSON(t, spec)
		// Nothing but the filter forbids these two in the sandbox.
		if out["ptrace"] != float64(0) || out["unshare"] != float64(0) {
			t.Errorf("without seccomp ptrace=%v unshare=%v; want both to work", out["ptrace"], out["unshare"])
		}
		if i386 == "i386" && out["i386_getpid"].(float64) <= 0 {
			t.Errorf("without seccomp i386 getpid = %v, want a pid", out["i386_getpid"])
		}
	})
}

// ia32Emulation reports whether the kernel runs i386 system calls from
// 64-bit processes (else int 0x80 would just crash the test program).
func ia32Emulation() bool {
	cmdline, _ := os.ReadFile("/proc/cmdline")
	if strings.Contains(string(cmdline), "ia32_emulation=0") {
		return false
	}
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		return false
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		return false
	}
	config, err := io.ReadAll(z)
	return err == nil && strings.Contains(string(config), "\nCONFIG_IA32_EMULATION=y\n") &&
		!strings.Contains(string(config), "\nCONFIG_IA32_EMULATION_DEFAULT_DISABLED=y\n")
}

// TestIdentity proves the program runs without capabilities (even when the
// host is root and there are no namespaces) and, in namespaces, as an
// unprivileged uid in its own UTS namespace, in a private writable /tmp, on
// a read-only root.
func TestIdentity(t *testing.T) {
	t.Parallel()
	const code = `
import json, os, socket
res = {"uid": os.getuid(), "gid": os.getgid(), "cwd": os.getcwd(), "host": socket.gethostname()}
with open("/proc/self/status") as f:
    res["status"] = {k: v.strip() for k, v in (l.split(":", 1) for l in f)}
with open("x", "w") as f:
    f.write("x")
res["tmp"] = os.listdir(".")
# Opened for writing but never written: harmless if the test fails.
for p in ("/usr/new", "/new", "/dev/new", "/proc/sys/vm/overcommit_memory", "/proc/sys/kernel/domainname"):
    try:
        open(p, "w").close()
        res[p] = "written"
    except OSError as e:
        res[p] = e.errno
print(json.dumps(res))
`
	noCaps := func(t *testing.T, status map[string]any) {
		for _, c := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
			if status[c] != "0000000000000000" {
				t.Errorf("%s = %v, want none", c, status[c])
			}
		}
		if status["NoNewPrivs"] != "1" {
			t.Errorf("NoNewPrivs = %v", status["NoNewPrivs"])
		}
	}
	for _, relax := range []Relax{{}, {Landlock: true}} {
		t.Run(fmt.Sprintf("namespaces, landlock=%v", !relax.Landlock), func(t *testing.T) {
			needLayers(t, relax)
			spec := pySpec(t, code)
			spec.Relax = relax
			out, _ := pyJSON(t, spec)
			if out["uid"] != float64(sandboxID) || out["gid"] != float64(sandboxID) {
				t.Errorf("uid %v gid %v, want %d", out["uid"], out["gid"], sandboxID)
			}
			noCaps(t, out["status"].(map[string]any))
			if out["cwd"] != "/tmp" || out["host"] != "sandbox" {
				t.Errorf("cwd %v host %v", out["cwd"], out["host"])
			}
			if tmp := out["tmp"].([]any); len(tmp) != 1 || tmp[0] != "x" {
				t.Errorf("/tmp holds %v, want just what the program wrote", tmp)
			}
			// The read-only mounts (and Landlock) stand in the way; /proc/sys
			// is not even there when /proc is the pid-only subset.
			for _, p := range []string{"/usr/new", "/new", "/dev/new", "/proc/sys/vm/overcommit_memory", "/proc/sys/kernel/domainname"} {
				if v, ok := out[p].(float64); !ok || (v != float64(unix.EROFS) && v != float64(unix.EACCES) && v != float64(unix.ENOENT)) {
					t.Errorf("%s: got %v, want EROFS, EACCES or ENOENT", p, out[p])
				}
			}
		})
	}
	t.Run("no namespaces", func(t *testing.T) {
		relax := Relax{Namespaces: true}
		needLayers(t, relax)
		spec := pySpec(t, code)
		spec.Relax = relax
		out, _ := pyJSON(t, spec)
		status := out["status"].(map[string]any)
		noCaps(t, status)
		if os.Geteuid() == 0 && status["CapBnd"] != "0000000000000000" {
			t.Errorf("CapBnd = %v: a root program could regain capabilities", status["CapBnd"])
		}
	})
}

// TestStartFailures proves Start reports what it cannot run instead of
// returning a sandbox that never ran.
func TestStartFailures(t *testing.T) {
	t.Parallel()
	needLayers(t, Relax{})
	dir := t.TempDir()
	cases := []struct {
		name string
		spec Spec
		want string
	}{
		{"relative argv0", Spec{Argv: []string{"sh"}}, "not an absolute path"},
		{"missing argv0", Spec{Argv: []string{"/nonexistent/prog"}}, "no such file"},
		{"missing read path", Spec{Argv: []string{"/bin/true"}, ReadPaths: []string{"/nonexistent"}}, "no such file"},
		{"not executable", Spec{Argv: []string{dir}}, "exec " + dir},
		{"bad env", Spec{Argv: []string{"/bin/true"}, Env: []string{"NOEQUALS"}}, "KEY=VALUE"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := Start(t.Context(), c.spec)
			if err == nil {
				_ = p.Kill()
				p.Wait()
				t.Fatal("Start succeeded")
			}
			if !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(c.want)) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
}
