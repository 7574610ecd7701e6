package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// buildRoot replaces the init's root with a fresh one holding only the read
// paths (bind-mounted read-only), a /proc of the new PID namespace, a minimal
// /dev and a private /tmp, then pivots into it. Whatever is not listed (the
// data directory, home directories, the host's working tree, /sys, /run) does
// not exist in the sandbox, with or without Landlock. It runs in the init,
// which holds CAP_SYS_ADMIN in the sandbox's user namespace. It reports
// whether /proc is the pid-only subset (see mountProc).
func buildRoot(readPaths []string, tmpBytes int64) (procSubset bool, err error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return false, fmt.Errorf("make mounts private: %w", err)
	}
	// Read-only and nosuid in one call for the whole host tree (in this
	// private namespace only): the read paths bound from it below inherit
	// both, one syscall each instead of two.
	if err := setReadOnly("/", true); err != nil {
		return false, err
	}
	root, err := rootMountPoint(readPaths)
	if err != nil {
		return false, err
	}
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m"); err != nil {
		return false, fmt.Errorf("mount root tmpfs: %w", err)
	}
	// The sandbox's own mounts come first, so read paths below /tmp (a
	// test's temporary directory, say) are mirrored into its tmpfs
	// instead of being covered by it. It belongs to the program's ids,
	// whatever ids the init has. noexec: nothing a program writes can be
	// executed (the read paths mirrored below it are mounts of their own,
	// executable as bound).
	if err := mkdirMount("tmpfs", root+sandboxTmp, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC,
		fmt.Sprintf("mode=0700,size=%d,%s", tmpBytes, sandboxOwner)); err != nil {
		return false, err
	}
	// /workspace (DESIGN §11), the program's working directory, lives in
	// its private /tmp: the root itself becomes read-only.
	if err := os.Symlink(sandboxTmp+"/"+Workspace, root+"/"+Workspace); err != nil {
		return false, fmt.Errorf("workspace link: %w", err)
	}
	if procSubset, err = mountProc(root + "/proc"); err != nil {
		return false, err
	}
	if err := buildDev(root, tmpBytes); err != nil {
		return false, err
	}
	m := mirror{root: root, bound: map[string]bool{}}
	paths := slices.Clone(readPaths)
	slices.Sort(paths) // ancestors first, so descendants are found covered
	for _, p := range paths {
		if err := m.add(p, 0); err != nil {
			return false, err
		}
	}
	// The skeleton itself (mount points, symlinks) becomes read-only too.
	if err := setReadOnly(root, false); err != nil {
		return false, err
	}
	if err := pivot(root); err != nil {
		return false, err
	}
	if err := unix.Chdir(sandboxTmp); err != nil {
		return false, fmt.Errorf("chdir %s: %w", sandboxTmp, err)
	}
	if err := unix.Sethostname([]byte("sandbox")); err != nil {
		return false, fmt.Errorf("sethostname: %w", err)
	}
	return procSubset, nil
}

// sandboxOwner makes a tmpfs the program's: it may run as another uid than
// the init that mounts it.
var sandboxOwner = fmt.Sprintf("uid=%d,gid=%d", sandboxID, sandboxID)

// procOptions shows only the PID namespace's processes, and of those only
// the ones the reader may ptrace: no host-global files (slabinfo, keys,
// kpageflags, sysrq-trigger, …) and not the init, which runs as another
// uid. Kernels before 5.8 refuse subset=pid; hidepid=2 is their way to hide
// the init.
const (
	procOptions    = "subset=pid,hidepid=invisible"
	procOptionsOld = "hidepid=2"
)

// mountProc mounts the sandbox's /proc: the pid-only subset if the kernel
// offers it (reported), else the whole procfs of the PID namespace with
// the init hidden if possible; root-only files there stay unreadable to
// the program's uid on a root host.
func mountProc(target string) (subset bool, err error) {
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC | unix.MS_RDONLY
	if err := mkdirMount("proc", target, "proc", flags, procOptions); err == nil {
		return true, nil
	}
	if err := mkdirMount("proc", target, "proc", flags, procOptionsOld); err == nil {
		return false, nil
	}
	return false, mkdirMount("proc", target, "proc", flags, "")
}

// rootMountPoint picks where to build the new root: an existing directory
// that holds no read path, since mounting over it hides what it holds. The
// mount namespace is private, so the host never sees the mount.
func rootMountPoint(readPaths []string) (string, error) {
	for _, dir := range []string{"/sys", "/mnt", "/srv", "/media", "/tmp"} {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		if !slices.ContainsFunc(readPaths, func(p string) bool { return within(p, dir) }) {
			return dir, nil
		}
	}
	return "", errors.New("no directory to build the sandbox root on")
}

// within reports whether p is dir or lies below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// pivot makes root the root directory and drops the old one entirely.
func pivot(root string) error {
	oldRoot, err := unix.Open("/", unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open old root: %w", err)
	}
	defer unix.Close(oldRoot)
	if err := unix.Chdir(root); err != nil {
		return fmt.Errorf("chdir new root: %w", err)
	}
	// pivot_root(".", ".") stacks the old root on top of the new one;
	// detaching it leaves no path back to the host's tree.
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Fchdir(oldRoot); err != nil {
		return fmt.Errorf("fchdir old root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return fmt.Errorf("chdir /: %w", err)
	}
	return nil
}

// buildDev mounts a tmpfs /dev holding the harmless device nodes (bound from
// the host's), the usual symlinks and a private /dev/shm; no disks, no tty.
func buildDev(root string, shmBytes int64) error {
	dev := root + "/dev"
	if err := mkdirMount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k"); err != nil {
		return err
	}
	for _, name := range []string{"null", "zero", "full", "random", "urandom"} {
		dst := dev + "/" + name
		if err := touch(dst); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+name, dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind /dev/%s: %w", name, err)
		}
	}
	links := [][2]string{
		{"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"},
	}
	for _, l := range links {
		if err := os.Symlink(l[0], dev+"/"+l[1]); err != nil {
			return fmt.Errorf("dev symlink: %w", err)
		}
	}
	// POSIX semaphores (multiprocessing locks) live in /dev/shm.
	if err := mkdirMount("tmpfs", dev+"/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC,
		fmt.Sprintf("mode=0700,size=%d,%s", shmBytes, sandboxOwner)); err != nil {
		return err
	}
	return setReadOnly(dev, false)
}

// mirror reproduces host paths under root: directories and symlinks on the
// way are recreated, the path itself is bind-mounted (read-only, as the
// host tree it comes from has been made).
type mirror struct {
	root  string
	bound map[string]bool
}

// add makes p visible under m.root, following symlinks the way a lookup
// would (a link is recreated, then its target is added too).
func (m *mirror) add(p string, depth int) error {
	if depth > 40 {
		return fmt.Errorf("read path %s: too many levels of symbolic links", p)
	}
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	cur := "/"
	for i, part := range parts {
		next := filepath.Join(cur, part)
		if m.bound[next] {
			return nil // already visible through a bound ancestor
		}
		fi, err := os.Lstat(next)
		if err != nil {
			return fmt.Errorf("read path %s: %w", p, err)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(next)
			if err != nil {
				return fmt.Errorf("read path %s: %w", p, err)
			}
			if err := os.Symlink(target, m.root+next); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("mirror symlink %s: %w", next, err)
			}
			if !filepath.IsAbs(target) {
				target = filepath.Join(cur, target)
			}
			return m.add(filepath.Join(append([]string{target}, parts[i+1:]...)...), depth+1)
		}
		if i == len(parts)-1 {
			return m.bind(next, fi.IsDir())
		}
		if err := os.Mkdir(m.root+next, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("mirror directory %s: %w", next, err)
		}
		cur = next
	}
	return nil
}

func (m *mirror) bind(p string, dir bool) error {
	dst := m.root + p
	var err error
	if dir {
		err = os.Mkdir(dst, 0o755)
	} else {
		err = touch(dst)
	}
	if err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("mount point for %s: %w", p, err)
	}
	if err := unix.Mount(p, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s: %w", p, err)
	}
	m.bound[p] = true
	return nil
}

func mkdirMount(source, target, fstype string, flags uintptr, data string) error {
	if err := os.Mkdir(target, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("mount point %s: %w", target, err)
	}
	if err := unix.Mount(source, target, fstype, flags, data); err != nil {
		return fmt.Errorf("mount %s on %s: %w", fstype, target, err)
	}
	return nil
}

// setReadOnly makes the mount at path (and, if recursive, those below it)
// read-only and nosuid. mount_setattr adds flags without having to repeat
// the ones the host set, which a user namespace may not clear.
func setReadOnly(path string, recursive bool) error {
	var flags uint
	if recursive {
		flags = unix.AT_RECURSIVE
	}
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID}
	if err := unix.MountSetattr(unix.AT_FDCWD, path, flags, &attr); err != nil {
		return fmt.Errorf("make %s read-only: %w", path, err)
	}
	return nil
}

func touch(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}
