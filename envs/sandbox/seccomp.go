package sandbox

import (
	"encoding/binary"
	"fmt"
	"unsafe"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM: they reach kernel surface (modules, keys,
// BPF, perf, mounts, namespaces, tracing, io_uring, message queues) a sandboxed interpreter
// never needs, or a count the whole host shares: Linux AIO contexts
// (fs.aio-max-nr, 65536 events by default, which one io_setup could take).
var deniedSyscalls = []string{
	"ptrace", "process_vm_readv", "process_vm_writev",
	"mount", "umount2", "pivot_root", "chroot", "mount_setattr",
	"open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick",
	"unshare", "setns",
	"bpf", "perf_event_open", "userfaultfd",
	"init_module", "finit_module", "delete_module",
	"kexec_load", "kexec_file_load", "reboot",
	"keyctl", "add_key", "request_key",
	// A POSIX message queue outlives its program in the IPC namespace a
	// keeper's next program shares, and nothing there can list it; mq_open
	// makes it even where Landlock then refuses to open it.
	"mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",
	"swapon", "swapoff", "acct", "quotactl", "syslog",
	"name_to_handle_at", "open_by_handle_at",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
	"settimeofday", "clock_settime", "clock_adjtime",
	"sethostname", "setdomainname", "iopl", "ioperm", "uselib", "vhangup",
}

// cloneNamespaceFlags are clone(2) flags that create namespaces. (CLONE_NEWTIME
// shares its bit with the exit signal in clone(2), so it is left out here;
// clone3 and unshare, which could set it, are refused whole.)
const cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET

// loadSeccomp installs the filters on the calling process (all threads).
//
// go-seccomp-bpf assembles each policy group as "match → action, else default
// action", so a second group in one policy is never reached; each errno
// therefore gets its own filter, and the kernel runs all stacked filters.
// Its policies also return the default action (allow) for a foreign
// architecture, which would let int 0x80 (i386) system calls bypass the deny
// list, so a small filter of our own refuses every foreign-ABI call.
func loadSeccomp(network bool) error {
	if err := loadNativeArchOnly(); err != nil {
		return err
	}
	for _, g := range seccompGroups(network) {
		f := seccomp.Filter{
			NoNewPrivs: true,
			Flag:       seccomp.FilterFlagTSync,
			Policy:     seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: []seccomp.SyscallGroup{g}},
		}
		if err := seccomp.LoadFilter(f); err != nil {
			return fmt.Errorf("seccomp: %w", err)
		}
	}
	return nil
}

// seccompGroups are the deny groups of the filter, one filter each.
func seccompGroups(network bool) []seccomp.SyscallGroup {
	return seccompGroupsDenying(deniedSyscalls, true, network)
}

// seccompGroupsDenying are the deny groups with the given EPERM list, and
// clone(2) with namespace flags denied unless cloneNamespaces.
func seccompGroupsDenying(denied []string, cloneNamespaces, network bool) []seccomp.SyscallGroup {
	eperm := seccomp.SyscallGroup{
		Action: seccomp.ActionErrno | seccomp.Action(unix.EPERM),
		Names:  denied,
	}
	if cloneNamespaces {
		eperm.NamesWithCondtions = append(eperm.NamesWithCondtions, seccomp.NameWithConditions{
			Name: "clone",
			Conditions: []seccomp.Condition{{
				Argument: 0, Operation: seccomp.BitsSet, Value: cloneNamespaceFlags,
			}},
		})
	}
	if !network {
		// Any socket family but AF_UNIX: no TCP, UDP, raw, netlink or
		// packet sockets, even if the network namespace had an interface.
		for _, name := range []string{"socket", "socketpair"} {
			eperm.NamesWithCondtions = append(eperm.NamesWithCondtions, seccomp.NameWithConditions{
				Name: name,
				Conditions: []seccomp.Condition{{
					Argument: 0, Operation: seccomp.NotEqual, Value: unix.AF_UNIX,
				}},
			})
		}
	}
	// clone3 passes its flags in memory a filter cannot read; ENOSYS makes
	// glibc fall back to clone(2), whose flags the filter above checks.
	enosys := seccomp.SyscallGroup{
		Action: seccomp.ActionErrno | seccomp.Action(unix.ENOSYS),
		Names:  []string{"clone3"},
	}
	return []seccomp.SyscallGroup{eperm, enosys}
}

// seccompPrograms are the same filters as loadSeccomp installs, as raw
// struct sock_filter arrays (8 bytes per instruction, native byte order),
// in the order to install them: for a process that cannot run Go (a child
// forked from a Python template) to load itself.
func seccompPrograms(network bool) ([][]byte, error) {
	return seccompProgramsDenying(deniedSyscalls, true, network)
}

// seccompProgramsDenying is seccompPrograms with the given EPERM list, and
// clone(2) with namespace flags denied unless cloneNamespaces.
func seccompProgramsDenying(denied []string, cloneNamespaces, network bool) ([][]byte, error) {
	arch, err := nativeArchOnly()
	if err != nil {
		return nil, err
	}
	progs := [][]bpf.Instruction{arch}
	for _, g := range seccompGroupsDenying(denied, cloneNamespaces, network) {
		p := seccomp.Policy{DefaultAction: seccomp.ActionAllow, Syscalls: []seccomp.SyscallGroup{g}}
		ins, err := p.Assemble()
		if err != nil {
			return nil, fmt.Errorf("seccomp: assemble: %w", err)
		}
		progs = append(progs, ins)
	}
	var out [][]byte
	for _, p := range progs {
		raw, err := bpf.Assemble(p)
		if err != nil {
			return nil, fmt.Errorf("seccomp: assemble: %w", err)
		}
		b := make([]byte, 0, 8*len(raw))
		for _, r := range raw {
			b = binary.NativeEndian.AppendUint16(b, r.Op)
			b = append(b, r.Jt, r.Jf)
			b = binary.NativeEndian.AppendUint32(b, r.K)
		}
		out = append(out, b)
	}
	return out, nil
}

// nativeArchOnly is a filter that fails every system call made through
// another ABI than the native one with ENOSYS.
func nativeArchOnly() ([]bpf.Instruction, error) {
	native, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp: native architecture: %w", err)
	}
	return []bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(native.ID), SkipFalse: 1},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ALLOW},
		bpf.RetConstant{Val: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
	}, nil
}

// loadNativeArchOnly installs a filter that fails every system call made
// through another ABI than the native one with ENOSYS.
func loadNativeArchOnly() error {
	ins, err := nativeArchOnly()
	if err != nil {
		return err
	}
	prog, err := bpf.Assemble(ins)
	if err != nil {
		return fmt.Errorf("seccomp: assemble arch filter: %w", err)
	}
	filter := make([]unix.SockFilter, len(prog))
	for i, ins := range prog {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	fprog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("seccomp: no_new_privs: %w", err)
	}
	tid, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER,
		unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&fprog)))
	if errno != 0 {
		return fmt.Errorf("seccomp: arch filter: %w", errno)
	}
	if tid != 0 {
		// TSYNC names the thread it could not synchronise.
		return fmt.Errorf("seccomp: arch filter: thread %d could not be synchronised", tid)
	}
	return nil
}
