package sandbox

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Spec says what to run in a sandbox and how tightly to hold it.
type Spec struct {
	// Argv is the program's argument vector. Argv[0] must be the absolute
	// path of the real executable (never a shim script): it is exec'd as is.
	Argv []string
	// Env is added to the fixed base environment (PATH, HOME and TMPDIR set
	// to the work directory, LANG=C.UTF-8, PYTHONDONTWRITEBYTECODE=1) as
	// KEY=VALUE entries, overriding base entries with the same key. Nothing
	// is taken from the caller's own environment.
	Env []string
	// Stdin, Stdout and Stderr become fds 0, 1 and 2, as in exec.Cmd: an
	// *os.File is passed as is, any other reader or writer through a pipe;
	// nil means /dev/null.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// ExtraFiles become fds 3, 4, … in the program, as in exec.Cmd. The
	// program receives exactly fds 0-2 and these, nothing else.
	ExtraFiles []*os.File
	// ReadPaths are made readable and executable in the sandbox besides the
	// system defaults (DefaultReadPaths): the interpreter's prefix, the
	// runtime package. Each must be an absolute path that exists. Argv[0]
	// is always readable.
	ReadPaths []string
	// Limits are the resource limits; zero fields take DefaultLimits.
	Limits Limits
	// Relax turns layers off, for machines that refuse one or operators
	// who opt out.
	Relax Relax
	// Logger receives warnings about clean-up that failed; nil discards them.
	Logger *slog.Logger
}

// Limits are the resource limits of one sandbox. Zero means the default.
type Limits struct {
	// MemoryBytes caps the memory of the whole sandbox: a cgroup memory
	// limit where the machine allows one, else RLIMIT_DATA of each process
	// (its private writable memory; shared mappings are not counted).
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// CPUSeconds caps the CPU time of the whole sandbox, every process
	// it ever held counted: the host kills it once its CPU cgroup has used
	// this much (since Start or the last ResetUsage). Without a CPU
	// accounting cgroup it is RLIMIT_CPU of each process instead: SIGXCPU
	// at this many CPU seconds, SIGKILL one second later.
	CPUSeconds int64 `json:"cpuSeconds,omitempty"`
	// CPUMillicores is the sandbox's CPU bandwidth (CFS quota) in
	// thousandths of a core: 1000 lets it use at most one core's worth of
	// time however many processes it runs.
	CPUMillicores int64 `json:"cpuMillicores,omitempty"`
	// Procs caps processes and threads: a cgroup pids limit where the
	// machine allows one, and RLIMIT_NPROC.
	Procs int64 `json:"procs,omitempty"`
	// FileSizeBytes is RLIMIT_FSIZE, the largest file the program may write.
	FileSizeBytes int64 `json:"fileSizeBytes,omitempty"`
	// OpenFiles is RLIMIT_NOFILE.
	OpenFiles int64 `json:"openFiles,omitempty"`
	// TmpBytes is the size of the private work directory (/tmp, a tmpfs
	// whose pages also count against MemoryBytes). Without namespaces the
	// work directory is a host directory and this limit does not apply.
	TmpBytes int64 `json:"tmpBytes,omitempty"`
}

// DefaultLimits are the limits a zero Limits field takes.
var DefaultLimits = Limits{
	MemoryBytes:   512 << 20,
	CPUSeconds:    60,
	CPUMillicores: 1000,
	Procs:         128,
	FileSizeBytes: 64 << 20,
	OpenFiles:     256,
	TmpBytes:      64 << 20,
}

func (l Limits) withDefaults() Limits {
	pick := func(v, d int64) int64 {
		if v > 0 {
			return v
		}
		return d
	}
	return Limits{
		MemoryBytes:   pick(l.MemoryBytes, DefaultLimits.MemoryBytes),
		CPUSeconds:    pick(l.CPUSeconds, DefaultLimits.CPUSeconds),
		CPUMillicores: pick(l.CPUMillicores, DefaultLimits.CPUMillicores),
		Procs:         pick(l.Procs, DefaultLimits.Procs),
		FileSizeBytes: pick(l.FileSizeBytes, DefaultLimits.FileSizeBytes),
		OpenFiles:     pick(l.OpenFiles, DefaultLimits.OpenFiles),
		TmpBytes:      pick(l.TmpBytes, DefaultLimits.TmpBytes),
	}
}

// Relax turns sandbox layers off. The zero value keeps every layer.
type Relax struct {
	// Network lets the program use the host's network: no network
	// namespace, no socket-family filter, no Landlock network rules.
	Network bool `json:"network,omitempty"`
	// Namespaces runs the program without namespaces: no private root,
	// /proc or /tmp (the work directory is a host temporary directory), and
	// only the cgroup, if any, can find setsid'd grandchildren to kill.
	Namespaces bool `json:"namespaces,omitempty"`
	// Landlock skips the Landlock file-system, network and IPC rules.
	Landlock bool `json:"landlock,omitempty"`
	// Seccomp skips the seccomp filter (no_new_privs stays).
	Seccomp bool `json:"seccomp,omitempty"`
	// Cgroups skips the per-sandbox cgroups; limits fall back to rlimits.
	Cgroups bool `json:"cgroups,omitempty"`
}

// DefaultReadPaths are readable in every sandbox when they exist: the least
// a dynamically linked interpreter needs. /usr holds the libraries, the
// locales and the time zones; /bin and /lib are (merged-/usr) links into
// it on the way to an executable; /lib64 holds the dynamic loader, which
// reads /etc/ld.so.cache; /etc/localtime is the local time zone. Nothing
// else of /etc (no passwd, shadow, ssl/private, host configuration).
var DefaultReadPaths = []string{"/usr", "/bin", "/lib", "/lib64", "/etc/ld.so.cache", "/etc/localtime"}

// NetworkReadPaths are added when the program may use the network: name
// resolution (nsswitch, hosts, resolv.conf, gai.conf, host.conf, services,
// protocols) and the CA certificates and OpenSSL configuration TLS needs.
var NetworkReadPaths = []string{
	"/etc/nsswitch.conf", "/etc/hosts", "/etc/resolv.conf", "/etc/gai.conf", "/etc/host.conf",
	"/etc/services", "/etc/protocols", "/etc/ssl/certs", "/etc/ssl/openssl.cnf", "/etc/ca-certificates",
}

// sandboxTmp is the work directory inside the namespaces: a private tmpfs.
const sandboxTmp = "/tmp"

// Workspace is the name of a program's working directory in its work
// directory; inside the sandbox /workspace links to it.
const Workspace = "workspace"

// validate checks what Start cannot repair and returns the read paths the
// sandbox will grant: the defaults that exist, the caller's, and Argv[0].
func (s *Spec) validate() ([]string, error) {
	if len(s.Argv) == 0 {
		return nil, errors.New("sandbox: empty Argv")
	}
	if !filepath.IsAbs(s.Argv[0]) {
		return nil, fmt.Errorf("sandbox: Argv[0] %q is not an absolute path", s.Argv[0])
	}
	for _, kv := range s.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, fmt.Errorf("sandbox: Env entry %q is not KEY=VALUE", kv)
		}
	}
	var paths []string
	defaults := DefaultReadPaths
	if s.Relax.Network {
		defaults = append(slices.Clone(defaults), NetworkReadPaths...)
	}
	for _, p := range defaults {
		if _, err := os.Lstat(p); err == nil {
			paths = append(paths, p)
		}
	}
	// A copy: appending to the caller's slice would write into its spare
	// capacity, shared by every launch.
	for _, p := range append(slices.Clone(s.ReadPaths), s.Argv[0]) {
		if !filepath.IsAbs(p) {
			return nil, fmt.Errorf("sandbox: read path %q is not absolute", p)
		}
		// The sandbox has its own /proc and /dev.
		if within(filepath.Clean(p), "/proc") || within(filepath.Clean(p), "/dev") {
			return nil, fmt.Errorf("sandbox: read path %q: /proc and /dev are the sandbox's own", p)
		}
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("sandbox: read path: %w", err)
		}
		paths = append(paths, filepath.Clean(p))
	}
	return paths, nil
}

// environ is the program's whole environment: the fixed base, then Env.
func environ(workDir string, extra []string) []string {
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + workDir,
		"TMPDIR=" + workDir,
		"LANG=C.UTF-8",
		"PYTHONDONTWRITEBYTECODE=1",
	}
	index := make(map[string]int, len(env))
	for i, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		index[k] = i
	}
	for _, kv := range extra {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := index[k]; ok {
			env[i] = kv
			continue
		}
		index[k] = len(env)
		env = append(env, kv)
	}
	return env
}
