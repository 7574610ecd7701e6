package envtest

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// KernelCounts is Python that defines two functions over what the kernel
// counts per user (issue 22, item 4): hog() takes as much of each as it
// can and keeps it in the module's _held list (inotify and fanotify
// instances until they fail, pipes grown to 1 MiB until that fails, then
// plain pipes until one gets less than the 64 KiB default, POSIX message
// queues, queued real-time signals, and Linux AIO contexts, whose count,
// fs.aio-max-nr, is the whole host's), returning how many it got and the
// errno that stopped it; probe() takes one of each, lets it go and
// returns the errno of each (0: it worked) and the size a new pipe gets.
// hogWatches() takes inotify watches and fanotify marks (one per file it
// makes) until they fail. Both use only the interpreter's standard library
// and libc, so the same code runs as a sandboxed program and as a plain
// process of the host.
const KernelCounts = `
import ctypes, fcntl, os, signal, tempfile, threading

_libc = ctypes.CDLL(None, use_errno=True)
_F_SETPIPE_SZ, _F_GETPIPE_SZ = 1031, 1032
_FAN_REPORT_FID = 0x200  # the only class an unprivileged process may ask for
_NR_IO_SETUP, _NR_IO_DESTROY = {"x86_64": (206, 207), "aarch64": (0, 1)}[os.uname().machine]
_held = []


def _io_setup(events):
    ctx = ctypes.c_ulong(0)
    if _libc.syscall(_NR_IO_SETUP, events, ctypes.byref(ctx)) < 0:
        return -1, ctypes.get_errno()
    return ctx.value, 0


class _MqAttr(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_long), ("maxmsg", ctypes.c_long), ("msgsize", ctypes.c_long),
                ("curmsgs", ctypes.c_long), ("pad", ctypes.c_long * 4)]


def _mq_open(n):
    # 10 messages of 8 KiB: about 80 KiB of the user's RLIMIT_MSGQUEUE each.
    name = ("/cyrnel-counts-%d-%d" % (os.getpid(), n)).encode()
    attr = _MqAttr(0, 10, 8192, 0)
    q = _libc.mq_open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600, ctypes.byref(attr))
    err = ctypes.get_errno()
    if q >= 0:
        _libc.mq_unlink(name)  # the descriptor keeps the queue, and its bytes counted
    return q, err


def _fill(take, most=100000):
    n, err = 0, 0
    while n < most:
        fd, err = take(n)
        if fd < 0:
            break
        _held.append(fd)
        n += 1
    return n, err


def _call(fn, *args):
    fd = fn(*args)
    return fd, ctypes.get_errno()


def hog():
    res = {}
    res["inotify"], res["inotifyErrno"] = _fill(lambda n: _call(_libc.inotify_init1, 0))
    res["fanotify"], res["fanotifyErrno"] = _fill(lambda n: _call(_libc.fanotify_init, _FAN_REPORT_FID, 0))
    res["pipes1MiB"], res["pipeErrno"] = 0, 0
    while res["pipes1MiB"] < 4096:
        r, w = os.pipe()
        _held.extend((r, w))
        try:
            fcntl.fcntl(w, _F_SETPIPE_SZ, 1 << 20)
        except OSError as e:
            res["pipeErrno"] = e.errno
            break
        res["pipes1MiB"] += 1
    for _ in range(64):  # past the soft limit a new pipe gets the minimum
        r, w = os.pipe()
        _held.extend((r, w))
        res["pipeBytes"] = fcntl.fcntl(w, _F_GETPIPE_SZ)
        if res["pipeBytes"] < 65536:
            break
    res["mqueues"], res["mqueueErrno"] = _fill(_mq_open, 4096)
    res["aioEvents"], res["aioErrno"] = 0, 0
    while res["aioEvents"] < 1 << 20:
        ctx, res["aioErrno"] = _io_setup(8192)  # its ring is about 256 KiB
        if ctx < 0:
            break
        res["aioEvents"] += 8192
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN})
    res["signals"], res["signalErrno"] = 0, 0
    try:
        while res["signals"] < 1 << 21:
            signal.pthread_kill(threading.get_ident(), signal.SIGRTMIN)  # queued: tgkill
            res["signals"] += 1
    except OSError as e:
        res["signalErrno"] = e.errno
    return res


_IN_MODIFY = _FAN_MODIFY = 2
_FAN_MARK_ADD, _AT_FDCWD = 1, -100
_libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]


def hog_watches(most=1 << 20):
    ino, fan = _libc.inotify_init1(0), _libc.fanotify_init(_FAN_REPORT_FID, 0)
    _held.extend((ino, fan))
    res = {"inotifyWatches": 0, "inotifyWatchErrno": 0, "fanotifyMarks": 0, "fanotifyMarkErrno": 0}
    os.makedirs("watched", exist_ok=True)
    for i in range(most):
        if res["inotifyWatchErrno"] and res["fanotifyMarkErrno"]:
            break
        path = b"watched/%d" % i
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        if not res["inotifyWatchErrno"]:
            if _libc.inotify_add_watch(ino, path, _IN_MODIFY) < 0:
                res["inotifyWatchErrno"] = ctypes.get_errno()
            else:
                res["inotifyWatches"] += 1
        if not res["fanotifyMarkErrno"]:
            if _libc.fanotify_mark(fan, _FAN_MARK_ADD, _FAN_MODIFY, _AT_FDCWD, path) < 0:
                res["fanotifyMarkErrno"] = ctypes.get_errno()
            else:
                res["fanotifyMarks"] += 1
    return res


def probe():
    res = {}
    fd, path = tempfile.mkstemp()
    os.close(fd)
    ino, fan = _libc.inotify_init1(0), _libc.fanotify_init(_FAN_REPORT_FID, 0)
    res["inotifyWatch"] = 0 if _libc.inotify_add_watch(ino, path.encode(), _IN_MODIFY) >= 0 else ctypes.get_errno()
    res["fanotifyMark"] = 0 if _libc.fanotify_mark(fan, _FAN_MARK_ADD, _FAN_MODIFY, _AT_FDCWD, path.encode()) >= 0 else ctypes.get_errno()
    os.close(ino)
    os.close(fan)
    os.unlink(path)
    for name, fd, err in (("inotify", *_call(_libc.inotify_init1, 0)),
                          ("fanotify", *_call(_libc.fanotify_init, _FAN_REPORT_FID, 0)),
                          ("mqueue", *_mq_open(1 << 20))):
        res[name] = 0 if fd >= 0 else err
        if fd >= 0:
            os.close(fd)
    r, w = os.pipe()
    res["pipeBytes"] = fcntl.fcntl(w, _F_GETPIPE_SZ)
    try:
        fcntl.fcntl(w, _F_SETPIPE_SZ, 1 << 20)
        res["pipe1MiB"] = 0
    except OSError as e:
        res["pipe1MiB"] = e.errno
    os.close(r)
    os.close(w)
    ctx, res["aio"] = _io_setup(1)
    if ctx >= 0:
        _libc.syscall(_NR_IO_DESTROY, ctypes.c_ulong(ctx))
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN})
    try:
        signal.pthread_kill(threading.get_ident(), signal.SIGRTMIN)
        signal.sigtimedwait({signal.SIGRTMIN}, 0)
        res["signal"] = 0
    except OSError as e:
        res["signal"] = e.errno
    signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return res
`

// HogProblems says where what hog() returned falls short of each limit
// (the control: a sibling sharing the hog's user would have failed). The
// hog cannot make message queues where seccomp (EPERM) or Landlock
// (EACCES) holds it; mqueues reports whether it could, and so whether a
// probe must.
func HogProblems(hog map[string]any) (problems []string, mqueues bool) {
	num := func(k string) int { v, _ := hog[k].(float64); return int(v) }
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if num("inotify") != sysctl("fs/inotify/max_user_instances") || num("inotifyErrno") != int(unix.EMFILE) {
		bad("the hog got %d inotify instances (errno %d), want fs.inotify.max_user_instances then EMFILE", num("inotify"), num("inotifyErrno"))
	}
	if num("fanotify") != sysctl("fs/fanotify/max_user_groups") || num("fanotifyErrno") != int(unix.EMFILE) {
		bad("the hog got %d fanotify groups (errno %d), want fs.fanotify.max_user_groups then EMFILE", num("fanotify"), num("fanotifyErrno"))
	}
	if num("pipeErrno") != int(unix.EPERM) || num("pipeBytes") >= 65536 {
		bad("the hog grew %d pipes to 1 MiB (errno %d), then got %d-byte pipes; want EPERM at fs.pipe-user-pages-soft and smaller pipes after it",
			num("pipes1MiB"), num("pipeErrno"), num("pipeBytes"))
	}
	switch {
	case num("mqueues") == 0 && (num("mqueueErrno") == int(unix.EPERM) || num("mqueueErrno") == int(unix.EACCES)):
	case num("mqueueErrno") != int(unix.EMFILE) || num("mqueues") == 0:
		bad("the hog opened %d message queues (errno %d), want some then EMFILE at RLIMIT_MSGQUEUE", num("mqueues"), num("mqueueErrno"))
	default:
		mqueues = true
	}
	// Linux AIO contexts are counted for the whole host (fs.aio-max-nr),
	// not per user: a program may not make any (seccomp).
	if num("aioErrno") != int(unix.EPERM) || num("aioEvents") != 0 {
		bad("the hog set up %d AIO events (errno %d), want EPERM at once", num("aioEvents"), num("aioErrno"))
	}
	if num("signalErrno") != int(unix.EAGAIN) || num("signals") == 0 {
		bad("the hog queued %d signals (errno %d), want some then EAGAIN at RLIMIT_SIGPENDING", num("signals"), num("signalErrno"))
	}
	return problems, mqueues
}

// ProbeProblems says what probe() could not take that it should have: all
// of it on the host (root); in a sandbox all but AIO and, unless mqueues,
// message queues (EPERM: seccomp refuses both).
func ProbeProblems(got map[string]any, host, mqueues bool) (problems []string) {
	want := map[string]float64{"inotify": 0, "fanotify": 0, "inotifyWatch": 0, "fanotifyMark": 0,
		"signal": 0, "pipe1MiB": 0, "mqueue": 0, "aio": 0, "pipeBytes": 65536}
	if !host {
		want["aio"] = float64(unix.EPERM)
		if !mqueues {
			want["mqueue"] = float64(unix.EPERM)
		}
	}
	for k, v := range want {
		if got[k] != v {
			problems = append(problems, fmt.Sprintf("%s: got %v, want %v (0: it worked; else an errno or pipe bytes)", k, got[k], v))
		}
	}
	slices.Sort(problems)
	return problems
}

// WatchHogProblems says where what hog_watches() returned falls short of
// fs.inotify.max_user_watches and fs.fanotify.max_user_marks (ENOSPC).
func WatchHogProblems(hog map[string]any) (problems []string) {
	num := func(k string) int { v, _ := hog[k].(float64); return int(v) }
	if num("inotifyWatches") != sysctl("fs/inotify/max_user_watches") || num("inotifyWatchErrno") != int(unix.ENOSPC) {
		problems = append(problems, fmt.Sprintf("the hog added %d inotify watches (errno %d), want fs.inotify.max_user_watches then ENOSPC",
			num("inotifyWatches"), num("inotifyWatchErrno")))
	}
	if num("fanotifyMarks") != sysctl("fs/fanotify/max_user_marks") || num("fanotifyMarkErrno") != int(unix.ENOSPC) {
		problems = append(problems, fmt.Sprintf("the hog added %d fanotify marks (errno %d), want fs.fanotify.max_user_marks then ENOSPC",
			num("fanotifyMarks"), num("fanotifyMarkErrno")))
	}
	return problems
}

func sysctl(name string) int {
	b, _ := os.ReadFile("/proc/sys/" + name)
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n // 0 if unreadable: no hog count matches it
}
