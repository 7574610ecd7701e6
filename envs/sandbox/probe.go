package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"

	seccomp "github.com/elastic/go-seccomp-bpf"
)

// Support says which sandbox layers this machine offers to this process.
type Support struct {
	UserNS   bool `json:"userNamespace"`
	PIDNS    bool `json:"pidNamespace"`
	NetNS    bool `json:"netNamespace"`
	MountNS  bool `json:"mountNamespace"`
	IPCNS    bool `json:"ipcNamespace"`
	UTSNS    bool `json:"utsNamespace"`
	CgroupNS bool `json:"cgroupNamespace"`
	// NamespacesErr says why starting the helper in all namespaces and
	// building the private root failed; "" when it worked.
	NamespacesErr string `json:"namespacesError,omitempty"`
	// LandlockABI is the Landlock ABI version the kernel offers (capped at
	// the newest go-landlock knows); 0 when Landlock is unavailable.
	LandlockABI int  `json:"landlockAbi"`
	Seccomp     bool `json:"seccomp"`
	// Memory and Pids say where per-sandbox cgroups can be created.
	Memory CgroupSupport `json:"memoryCgroup"`
	Pids   CgroupSupport `json:"pidsCgroup"`
	// CPU is where a CPU bandwidth quota can be set (cpu controller);
	// CPUAcct where the sandbox's CPU time is counted: the cpuacct
	// hierarchy on v1, the cpu controller's own cgroup on v2.
	CPU     CgroupSupport `json:"cpuCgroup"`
	CPUAcct CgroupSupport `json:"cpuacctCgroup"`
	// ProcSubset: the sandbox's /proc holds only its own processes
	// (procfs subset=pid, kernel 5.8+); false, the kernel refused it and
	// host-global /proc files (those only root may read stay unreadable
	// to the sandbox's uid) are visible.
	ProcSubset bool `json:"procSubset"`
	// SandboxUID is the host uid programs run as: the host's own uid
	// (the only one an unprivileged host may map), or -1 on a root host,
	// which gives each sandbox a uid of its own from SandboxUIDs.
	SandboxUID  int      `json:"sandboxUid"`
	SandboxUIDs *IDRange `json:"sandboxUids,omitempty"`
	// RootUID: the host runs as uid 0. Without namespaces its programs do
	// too, which RLIMIT_NPROC does not bind (the kernel exempts the root
	// user), so only a pids cgroup limits their processes; in namespaces
	// they are their own uids, whom it binds.
	RootUID bool `json:"rootUid"`
}

// Layers says which layers hold a sandbox.
type Layers struct {
	Namespaces bool `json:"namespaces"`
	// Network is true when the program may use the host's network.
	Network     bool `json:"network"`
	LandlockABI int  `json:"landlockAbi"` // 0: Landlock off
	Seccomp     bool `json:"seccomp"`
	// Memory is how memory is limited: a cgroup or an rlimit.
	Memory LayerKind `json:"memory"`
	// Procs is how processes are limited: a cgroup, an rlimit, or none
	// (uid 0 without a pids cgroup).
	Procs LayerKind `json:"procs"`
	// CPU is how CPU time is limited: a cgroup (the whole sandbox's time,
	// counted by the cgroup and enforced by the host), or an rlimit
	// (RLIMIT_CPU, per process).
	CPU LayerKind `json:"cpu"`
	// CPUQuota: a CFS bandwidth quota caps the sandbox's CPU share.
	CPUQuota bool `json:"cpuQuota"`
	// ProcSubset: /proc shows only the sandbox's own processes.
	ProcSubset bool `json:"procSubset"`
	// UID is the host uid the program's file accesses are judged as, and
	// the owner of its user namespace; -1 before a sandbox took its own
	// from UIDs (a root host).
	UID  int      `json:"uid"`
	UIDs *IDRange `json:"uids,omitempty"`
}

// LayerKind says how a sandbox's memory, processes or CPU time are limited,
// as GET /environment reports it.
type LayerKind string

const (
	KindCgroupV1 LayerKind = "cgroup v1"
	KindCgroupV2 LayerKind = "cgroup v2"
	KindRlimit   LayerKind = "rlimit" // per process
	KindNone     LayerKind = "none"   // not limited
)

// cgroupKind is the kind of a limit held by a cgroup of version v.
func cgroupKind(v int) LayerKind {
	if v == 1 {
		return KindCgroupV1
	}
	return KindCgroupV2
}

// Cgroup reports whether a cgroup holds the limit: the whole sandbox's,
// not each process's.
func (k LayerKind) Cgroup() bool { return k == KindCgroupV1 || k == KindCgroupV2 }

// namespaces reports whether every namespace a sandbox needs is available.
func (s Support) namespaces(network bool) bool {
	return s.UserNS && s.PIDNS && s.MountNS && s.IPCNS && s.UTSNS && s.CgroupNS && (s.NetNS || network)
}

// Check returns an error naming every layer this machine lacks that r does
// not relax: the host's cue to refuse to run unsandboxed.
func (s Support) Check(r Relax) error {
	var missing []string
	if !r.Namespaces && !s.namespaces(r.Network) {
		missing = append(missing, "namespaces ("+s.NamespacesErr+")")
	}
	if !r.Landlock && s.LandlockABI == 0 {
		missing = append(missing, "Landlock (not offered by the kernel)")
	}
	if !r.Seccomp && !s.Seccomp {
		missing = append(missing, "seccomp (not offered by the kernel)")
	}
	if !r.Cgroups && s.RootUID && r.Namespaces && !s.Pids.OK() {
		missing = append(missing, "process limit (uid 0 is exempt from RLIMIT_NPROC and no pids cgroup is usable: "+s.Pids.Err+")")
	}
	if len(missing) > 0 {
		return fmt.Errorf("sandbox: unavailable on this machine: %s", strings.Join(missing, "; "))
	}
	return nil
}

// Layers says which layers a sandbox started with r would have here.
func (s Support) Layers(r Relax) Layers {
	l := Layers{
		Namespaces: !r.Namespaces && s.namespaces(r.Network),
		Network:    r.Network,
		Seccomp:    !r.Seccomp && s.Seccomp,
		Memory:     KindRlimit,
		Procs:      KindRlimit,
		CPU:        KindRlimit,
		UID:        os.Geteuid(),
	}
	if !r.Cgroups && s.CPUAcct.OK() {
		l.CPU = cgroupKind(s.CPUAcct.Version)
	}
	l.CPUQuota = !r.Cgroups && s.CPU.OK()
	if l.Namespaces {
		l.ProcSubset, l.UID = s.ProcSubset, s.SandboxUID
		if s.RootUID {
			r := CurrentIDRange() // SetIDRange may follow Probe
			l.UIDs = &r
		}
	}
	if !r.Landlock {
		l.LandlockABI = s.LandlockABI
	}
	if !r.Cgroups && s.Memory.OK() {
		l.Memory = cgroupKind(s.Memory.Version)
	}
	switch {
	case !r.Cgroups && s.Pids.OK():
		l.Procs = cgroupKind(s.Pids.Version)
	case s.RootUID && !l.Namespaces:
		l.Procs = KindNone
	}
	return l
}

var probeOnce = sync.OnceValue(probe)

// Probe reports which layers this machine supports. The first call starts
// the helper once or a few times (a few milliseconds) and removes cgroups
// that hosts which died left behind; the result is cached.
func Probe() Support { return probeOnce() }

func probe() Support {
	s := Support{
		LandlockABI: landlockABI(),
		Seccomp:     seccomp.Supported(),
		Memory:      detectCgroup("memory"),
		Pids:        detectCgroup("pids"),
		CPU:         detectCgroup("cpu"),
		CPUAcct:     detectCgroup("cpuacct"),
		RootUID:     os.Geteuid() == 0,
		SandboxUID:  os.Geteuid(),
	}
	if s.RootUID {
		r := CurrentIDRange()
		s.SandboxUID, s.SandboxUIDs = -1, &r
	}
	if !s.CPUAcct.OK() {
		// v2 has no cpuacct: every cgroup counts its CPU time in
		// cpu.stat, with or without the cpu controller.
		for _, c := range []CgroupSupport{s.CPU, s.Memory, s.Pids} {
			if c.Version == 2 {
				s.CPUAcct = c
				break
			}
		}
	}
	sweepCgroups(s.Memory.Dir, s.Pids.Dir, s.CPU.Dir, s.CPUAcct.Dir)
	var err error
	s.ProcSubset, err = probeNamespaces(allNamespaces, true)
	if err == nil {
		s.UserNS, s.PIDNS, s.NetNS, s.MountNS, s.IPCNS, s.UTSNS, s.CgroupNS = true, true, true, true, true, true, true
		return s
	}
	s.NamespacesErr = err.Error()
	// Find out which namespace is refused, for the report.
	one := func(flag uintptr) bool {
		_, err := probeNamespaces(syscall.CLONE_NEWUSER|flag, false)
		return err == nil
	}
	if s.UserNS = one(0); !s.UserNS {
		return s
	}
	s.PIDNS = one(syscall.CLONE_NEWPID)
	s.NetNS = one(syscall.CLONE_NEWNET)
	s.MountNS = one(syscall.CLONE_NEWNS)
	s.IPCNS = one(syscall.CLONE_NEWIPC)
	s.UTSNS = one(syscall.CLONE_NEWUTS)
	s.CgroupNS = one(syscall.CLONE_NEWCGROUP)
	return s
}

// probeNamespaces starts the helper in the given namespaces and, if root,
// has it build a sandbox root, then lets it exit. It reports whether the
// root's /proc is the pid-only subset.
func probeNamespaces(flags uintptr, root bool) (procSubset bool, err error) {
	if !hooked.Load() {
		return false, errNotHooked
	}
	p := &Process{done: make(chan struct{}), logger: discardLogger}
	err = p.start(context.Background(), launch{
		cloneflags: flags,
		init:       initSpec{Namespaces: root, ProbeOnly: true, ReadPaths: []string{"/usr"}, TmpBytes: 1 << 20, WorkDir: "/"},
	})
	<-p.done
	return p.procSubset, err
}

var errNotHooked = errors.New("sandbox: sandbox.MaybeRun was not called at start-up, so this binary cannot act as its own sandbox helper")
