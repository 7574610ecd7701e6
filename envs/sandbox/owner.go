package sandbox

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// hostDumpable is the host process's dumpable flag as it started: changing
// a thread's effective uid resets the flag of the whole process, which
// asOwner sets back.
var hostDumpable = sync.OnceValue(func() int {
	d, _ := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0) // cannot fail
	return d
})

// asOwner runs start with the calling OS thread's effective uid and gid set
// to id, its capabilities still effective (the real and saved ids stay
// root's, which keep the permitted set). A user namespace cloned meanwhile
// belongs to id: the kernel charges the counts it keeps per user
// (inotify, fanotify, message queue bytes, pending signals, namespaces…)
// of everything inside it to id at the host's level, where the limits
// hold, instead of to root. The capabilities are needed to write the new
// namespace's maps (another uid than id, and root for the init).
//
// Only this thread changes (raw system calls, not the runtime's
// all-threads ones); the caller must hold it with runtime.LockOSThread.
// When the thread cannot be given back its ids, restored is false and the
// caller must never unlock it: the runtime then ends the thread with its
// goroutine.
func asOwner(id int, start func() error) (err error, restored bool) {
	dumpable := hostDumpable()
	euid, egid := unix.Geteuid(), unix.Getegid()
	if err := setThreadIDs(id, id); err != nil {
		return err, setThreadIDs(euid, egid) == nil
	}
	if err := raiseEffective(); err != nil {
		return err, setThreadIDs(euid, egid) == nil
	}
	err = start()
	// Back to euid 0, the kernel makes the permitted set effective again.
	if rerr := setThreadIDs(euid, egid); rerr != nil {
		return fmt.Errorf("sandbox: give the host thread its ids back: %w", rerr), false
	}
	if dumpable == 1 {
		_ = unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0) // was allowed at start-up
	}
	return err, true
}

// setThreadIDs sets the calling thread's effective uid and gid (-1 keeps
// the real and saved ones), the gid first while the thread may still.
func setThreadIDs(uid, gid int) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, ^uintptr(0), uintptr(gid), ^uintptr(0)); e != 0 {
		return fmt.Errorf("sandbox: thread egid %d: %w", gid, e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, ^uintptr(0), uintptr(uid), ^uintptr(0)); e != 0 {
		return fmt.Errorf("sandbox: thread euid %d: %w", uid, e)
	}
	return nil
}

// raiseEffective makes the calling thread's permitted capabilities
// effective again: leaving euid 0 cleared them.
func raiseEffective() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("sandbox: capget: %w", err)
	}
	for i := range data {
		data[i].Effective = data[i].Permitted
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("sandbox: capset: %w", err)
	}
	return nil
}
