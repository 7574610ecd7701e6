package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// templateTmpBytes bounds the template's own /tmp: what preloads cache there
// (matplotlib's font list is ~50 KiB) and the mount points of read paths.
const templateTmpBytes = 16 << 20

// runTemplate is the template helper stage: PID 1 of the template's
// namespaces, it builds the sandbox root once, keeps only the capabilities
// the template needs to hand each child its uid, and execs the template.
func runTemplate() int {
	specFile := os.NewFile(3, "spec")
	var s templateSpec
	err := json.NewDecoder(specFile).Decode(&s)
	_ = specFile.Close()
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "sandbox template: %v\n", err)
		return 125
	}
	if err != nil {
		return fail(fmt.Errorf("read spec: %w", err))
	}
	// /proc stays the template's own: a child may mount its own /proc only
	// where one is fully visible. /tmp is the template's; each child mounts
	// its own over it.
	if _, err := buildRoot(s.ReadPaths, templateTmpBytes); err != nil {
		return fail(err)
	}
	// Children (their own uids) reach the read paths mirrored below the
	// template's /tmp through it; they list nothing there. The template
	// owns it: preloads that want a temporary, config or cache directory
	// (matplotlib's font list) write there, under the same paths a child
	// then finds in its own /tmp.
	if err := os.Chown(sandboxTmp, os.Getuid(), os.Getgid()); err != nil {
		return fail(fmt.Errorf("chown %s: %w", sandboxTmp, err))
	}
	if err := os.Chmod(sandboxTmp, 0o711); err != nil {
		return fail(fmt.Errorf("chmod %s: %w", sandboxTmp, err))
	}
	// Writable, for each child to write its own uid and gid maps.
	if err := unix.Mount("proc", "/proc", "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fail(fmt.Errorf("make /proc writable: %w", err))
	}
	// The control socket becomes fd 3; nothing else passes.
	if err := unix.Dup3(4, 3, 0); err != nil {
		return fail(fmt.Errorf("dup control socket: %w", err))
	}
	if err := unix.CloseRange(4, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fail(fmt.Errorf("close_range: %w", err))
	}
	keep := map[int]bool{unix.CAP_SETUID: true, unix.CAP_SETGID: true}
	for c := range 64 {
		if keep[c] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) {
				break
			}
			return fail(fmt.Errorf("drop bounding capability %d: %w", c, err))
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("no_new_privs: %w", err))
	}
	err = syscall.Exec(s.Argv[0], s.Argv, s.Env)
	return fail(fmt.Errorf("exec %s: %s: %w", s.Argv[0], strings.Join(s.Argv[1:2], " "), err))
}
