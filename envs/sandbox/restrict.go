package sandbox

import (
	"fmt"
	"os"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// execSpec is what the init hands the exec stage: everything the program
// inherits from it.
type execSpec struct {
	Argv       []string `json:"argv"`
	Env        []string `json:"env"`
	ReadPaths  []string `json:"readPaths"`
	WritePaths []string `json:"writePaths"`
	Limits     Limits   `json:"limits"`
	// MemoryRlimit says no memory cgroup holds the sandbox, so each
	// process's memory is limited with RLIMIT_DATA instead.
	MemoryRlimit bool `json:"memoryRlimit"`
	// CPURlimit says no cgroup counts the sandbox's CPU time, so each
	// process is held by RLIMIT_CPU instead.
	CPURlimit bool `json:"cpuRlimit"`
	Landlock  bool `json:"landlock"`
	Seccomp   bool `json:"seccomp"`
	Network   bool `json:"network"`
}

// restrict applies to the calling process every layer the program
// inherits. processLimits adds RLIMIT_NPROC and, if no memory cgroup holds
// the sandbox, RLIMIT_DATA: only a process that does nothing but exec
// afterwards may take those (the exec stage).
func restrict(s execSpec, processLimits bool) error {
	l := s.Limits
	type limit struct {
		resource   int
		soft, hard int64
	}
	limits := []limit{
		{unix.RLIMIT_FSIZE, l.FileSizeBytes, l.FileSizeBytes},
		{unix.RLIMIT_NOFILE, l.OpenFiles, l.OpenFiles},
		{unix.RLIMIT_CORE, 0, 0},
	}
	if s.CPURlimit {
		// SIGXCPU first, so a program can tell why; SIGKILL a second later.
		limits = append(limits, limit{unix.RLIMIT_CPU, l.CPUSeconds, l.CPUSeconds + 1})
	}
	if processLimits {
		limits = append(limits, limit{unix.RLIMIT_NPROC, l.Procs, l.Procs})
	}
	for _, r := range limits {
		if err := setRlimit(r.resource, r.soft, r.hard); err != nil {
			return err
		}
	}
	// Landlock sets no_new_privs itself, seccomp too; this covers a
	// sandbox with both relaxed.
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	if s.Landlock {
		if err := restrictLandlock(s); err != nil {
			return err
		}
	}
	if s.Seccomp {
		if err := loadSeccomp(s.Network); err != nil {
			return err
		}
	}
	if processLimits && s.MemoryRlimit {
		// RLIMIT_DATA, not RLIMIT_AS: since Linux 4.7 it counts the
		// private writable mappings (heap, brk, anonymous memory), the
		// memory a process can fill by itself, and not address space it
		// only reserves. A Go program (the TypeScript worker) reserves
		// over a gigabyte of PROT_NONE address space at start and cannot
		// start under an RLIMIT_AS of any sane memory limit; under
		// RLIMIT_DATA its runtime dies "out of memory" at the limit.
		// Shared mappings (MAP_SHARED, memfd) are not counted: see
		// docs/sandbox.md. Last, so this stage's own Go runtime never
		// runs under it; exec starts the count over.
		if err := setRlimit(unix.RLIMIT_DATA, l.MemoryBytes, l.MemoryBytes); err != nil {
			return err
		}
	}
	return nil
}

// setRlimit lowers a limit; a hard limit already below the wanted one stays.
func setRlimit(resource int, soft, hard int64) error {
	var cur syscall.Rlimit
	if err := syscall.Getrlimit(resource, &cur); err != nil {
		return fmt.Errorf("getrlimit %d: %w", resource, err)
	}
	lim := syscall.Rlimit{Cur: uint64(soft), Max: uint64(hard)}
	lim.Max = min(lim.Max, cur.Max)
	lim.Cur = min(lim.Cur, lim.Max)
	// syscall.Setrlimit, not unix.Prlimit: it tells the Go runtime not to
	// restore its saved RLIMIT_NOFILE on exec.
	if err := syscall.Setrlimit(resource, &lim); err != nil {
		return fmt.Errorf("setrlimit %d: %w", resource, err)
	}
	return nil
}

// landlockABI is the kernel's Landlock ABI version, capped at the newest
// one go-landlock knows; 0 when Landlock is unavailable.
func landlockABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return min(v, 11)
}

// restrictLandlock allows reading (and executing) the read paths, reading
// /proc, writing the work directories and a few device files, and nothing
// else; it also denies TCP and UDP (unless the network is allowed) and
// signals and abstract sockets to processes outside the sandbox.
func restrictLandlock(s execSpec) error {
	cfg := landlock.V11
	if s.Network {
		cfg = landlock.Config{HandledAccessFS: cfg.HandledAccessFS, Scoped: cfg.Scoped}
	}
	rules := []landlock.Rule{
		landlock.RODirs("/proc"),
		landlock.RWFiles("/dev/null", "/dev/zero", "/dev/full"),
		landlock.ROFiles("/dev/random", "/dev/urandom"),
	}
	for _, p := range s.ReadPaths {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("landlock: %w", err)
		}
		if fi.IsDir() {
			rules = append(rules, landlock.RODirs(p))
		} else {
			rules = append(rules, landlock.ROFiles(p))
		}
	}
	for _, p := range s.WritePaths {
		rw := landlock.RWDirs(p)
		// Renames between directories need "refer"; asking for it on an
		// ABI 1 kernel would make best-effort mode drop Landlock entirely.
		if landlockABI() >= 2 {
			rw = rw.WithRefer()
		}
		rules = append(rules, rw)
	}
	if err := cfg.BestEffort().Restrict(rules...); err != nil {
		return fmt.Errorf("landlock: %w", err)
	}
	return nil
}
