package envtest

// KernelCounts is Python that defines two functions over what the kernel
// counts per user (issue 22, item 4): hog() takes as much of each as it
// can and keeps it in the module's _held list (inotify and fanotify
// instances until they fail, pipes grown to 1 MiB until that fails, then
// plain pipes until one gets less than the 64 KiB default, POSIX message
// queues, queued real-time signals), returning how many it got and the
// errno that stopped it; probe() takes one of each, lets it go and
// returns the errno of each (0: it worked) and the size a new pipe gets.
// Both use only the interpreter's standard library and libc, so the same
// code runs as a sandboxed program and as a plain process of the host.
const KernelCounts = `
import ctypes, fcntl, os, signal, threading

_libc = ctypes.CDLL(None, use_errno=True)
_F_SETPIPE_SZ, _F_GETPIPE_SZ = 1031, 1032
_FAN_REPORT_FID = 0x200  # the only class an unprivileged process may ask for
_held = []


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
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGRTMIN})
    res["signals"], res["signalErrno"] = 0, 0
    try:
        while res["signals"] < 1 << 21:
            signal.pthread_kill(threading.get_ident(), signal.SIGRTMIN)  # queued: tgkill
            res["signals"] += 1
    except OSError as e:
        res["signalErrno"] = e.errno
    return res


def probe():
    res = {}
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
