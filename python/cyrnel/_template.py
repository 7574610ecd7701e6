"""The forking template: a warm interpreter that forks sandboxed children,
sessions' interpreters and keepers, each of which forks one execution's
interpreter at a time from itself (envs/sandbox/template.go and keeper.go
have the protocol, docs/sandbox.md the design).

The template runs as root in its own mount (the sandbox root), PID, IPC,
UTS and (unless the children have the network) network namespaces with only
CAP_SETUID and CAP_SETGID, and never runs
untrusted code. It stays single-threaded: a forked child inherits no other
thread, so a lock another thread held would stay locked in the child.

Each child is cloned straight into new user, PID (it is PID 1), mount,
IPC, UTS, cgroup and (without the network) network namespaces, by the template running with the
child's own host uid as its effective uid, so the child's user namespace
belongs to that uid and the kernel's per-user counts (inotify, pipe pages,
pending signals...) of everything in it are charged to it, not to root.
Before it runs, the template writes its uid/gid maps (1000 inside, the
child's host uid outside), moves it
into cgroups of its own and hands the host its pidfd; the child then becomes
uid 1000, mounts its own /proc, /tmp and /dev/shm, drops every capability
and applies rlimits, no_new_privs, Landlock and seccomp before it reads its
first request. The template reaps it and reports how it ended.

Python 3.11 has no clone with namespace flags or mount: those go through
libc with ctypes (with CPython's own before/after-fork hooks around clone).
"""

from __future__ import annotations

import base64
import ctypes
import fcntl
import gc
import io
import json
import os
import resource
import signal
import socket
import sys

from cyrnel import _keeper, _worker

TYPE_CHECKING = False  # typing costs every interpreter an import; mypy reads it as True
if TYPE_CHECKING:
    from typing import Any, NoReturn

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long
# Declared, so a call passes Python ints without a c_ulong object per
# argument: a child makes ~45 of these calls before its program runs.
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_pythonapi = ctypes.pythonapi

# x86_64 and aarch64 system call numbers (the generic table for the new ones).
_MACHINE = os.uname().machine
_NR = {
    "x86_64": {"capget": 125, "capset": 126, "seccomp": 317, "clone": 56},
    "aarch64": {"capget": 90, "capset": 91, "seccomp": 277, "clone": 220},
}[_MACHINE]
_NR_OPEN_TREE = 428
_NR_MOVE_MOUNT = 429
_NR_LANDLOCK_CREATE_RULESET = 444
_NR_LANDLOCK_ADD_RULE = 445
_NR_LANDLOCK_RESTRICT_SELF = 446

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_SET_MODE_FILTER = 1
OPEN_TREE_CLONE = 1
AT_RECURSIVE = 0x8000
MOVE_MOUNT_F_EMPTY_PATH = 4

# The first fd of the files a fork request carries, once moved clear of 0-4.
_HIGH_FD = 64


def receive(sock: socket.socket, most: int) -> tuple[bytes, list[int]]:
    """The next message on sock and the files it carries, moved clear of
    fds 0-7, which a program's own files take; b"" at end-of-file."""
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 4096, most)
            break
        except InterruptedError:
            continue
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _HIGH_FD) for fd in fds]
    for fd in fds:
        os.close(fd)
    return msg, high


def send_fd(status: int, message: bytes, fd: int) -> None:
    """Send message with fd over the status socket, through a duplicate
    closed here: one left to the collector formats a ResourceWarning (the
    socket's repr and its enums), about 20 pages a keeper copies again after
    each fork."""
    with socket.socket(fileno=os.dup(status)) as sock:
        socket.send_fds(sock, [message], [fd])


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _prctl(option: int, arg: int) -> None:
    _check(_libc.prctl(option, arg, 0, 0, 0), f"prctl {option}")


def _mount(source: str, target: str, fstype: str, flags: int, data: str | None) -> None:
    _check(
        _libc.mount(source.encode(), target.encode(), fstype.encode(), ctypes.c_ulong(flags), data.encode() if data else None),
        f"mount {fstype} on {target}",
    )


def _write(path: str, data: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data.encode())
    finally:
        os.close(fd)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


# The Landlock rules every child of this template shares, prepared once by
# main(): (an O_PATH descriptor, its access) for each read path and device.
# A rule names an inode, so only the child's own mounts (/proc, /tmp,
# /dev/shm) are opened in the child.
_shared_rules: list[tuple[int, int]] = []


def _prepare_rules(ll: dict[str, int], read_paths: list[str]) -> list[tuple[int, int]]:
    """Open the read paths (a path below another is covered by its rule)
    and the devices once, clear of the fds a child's program takes."""
    kept = [p for p in read_paths if not any(p.startswith(q.rstrip("/") + "/") for q in read_paths if q != p)]
    rules = [(p, ll["readDir"], ll["readFile"]) for p in kept]
    rules += [("/dev/null", 0, ll["rwFile"]), ("/dev/zero", 0, ll["rwFile"]), ("/dev/full", 0, ll["rwFile"])]
    rules += [("/dev/random", 0, ll["readFile"]), ("/dev/urandom", 0, ll["readFile"])]
    prepared = []
    for path, dir_access, file_access in rules:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _HIGH_FD)
        os.close(fd)
        prepared.append((high, dir_access if os.path.isdir(path) else file_access))
    return prepared


def _add_rule(ruleset: int, fd: int, access: int) -> None:
    rule = _PathBeneath(access, fd)
    _check(_libc.syscall(_NR_LANDLOCK_ADD_RULE, ruleset, 1, ctypes.byref(rule), 0), "landlock rule")


def _landlock_ruleset(ll: dict[str, int]) -> int:
    """A ruleset with the template's shared rules, to which the child adds
    its own mounts' (_landlock_restrict)."""
    abi = ll["abi"]
    # The attribute grew with the ABI: net rights in 4, scopes in 6.
    size = 8 if abi < 4 else 16 if abi < 6 else 24
    attr = _RulesetAttr(ll["fs"], ll["net"], ll["scoped"])
    ruleset = _check(_libc.syscall(_NR_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0), "landlock ruleset")
    for fd, access in _shared_rules:
        _add_rule(ruleset, fd, access)
    return ruleset


def _landlock_restrict(ruleset: int, ll: dict[str, int]) -> None:
    """Add the child's own mounts to its ruleset and enforce it."""
    try:
        for path, access in (("/proc", ll["readDir"]), ("/tmp", ll["rwDir"]), ("/dev/shm", ll["rwDir"])):
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                _add_rule(ruleset, fd, access)
            finally:
                os.close(fd)
        _check(_libc.syscall(_NR_LANDLOCK_RESTRICT_SELF, ruleset, 0), "landlock restrict")
    finally:
        os.close(ruleset)


def _seccomp(programs: list[bytes]) -> None:
    for raw in programs:
        buf = ctypes.create_string_buffer(raw, len(raw))
        fprog = _SockFprog(len(raw) // 8, ctypes.cast(buf, ctypes.c_void_p))
        _check(_libc.syscall(_NR["seccomp"], SECCOMP_SET_MODE_FILTER, 0, ctypes.byref(fprog)), "seccomp")


def _drop_capabilities() -> None:
    cap = 0
    while _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0:
        cap += 1
    hdr = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    _check(_libc.syscall(_NR["capset"], ctypes.byref(hdr), ctypes.byref(data)), "capset")


def _lower_rlimit(res: int, soft: int, hard: int) -> None:
    cur_soft, cur_hard = resource.getrlimit(res)
    if cur_hard != resource.RLIM_INFINITY:
        hard = min(hard, cur_hard)
    resource.setrlimit(res, (min(soft, hard), hard))


def _program(cfg: dict[str, Any], status: int, fds: list[int], session: bool) -> NoReturn:
    """PID 1 of the child's namespaces: lock down, then serve a session's
    executions from a child of PID 1 or, as a keeper (every other child),
    fork each program it is given (_keeper.keep)."""
    limits = cfg["limits"]
    # fds 1-6 as the worker expects them; the status socket next until the
    # child is locked down; nothing else of the template's.
    for target, fd in enumerate(fds, start=1):
        os.dup2(fd, target)
    status_fd = len(fds) + 1
    os.dup2(status, status_fd)
    ll, ruleset = cfg["landlock"], -1
    try:
        if ll["abi"]:
            # Built while the shared rules' descriptors are still open.
            made, ruleset = _landlock_ruleset(ll), status_fd + 1
            if made != ruleset:
                os.dup2(made, ruleset)
                os.close(made)
    except Exception as e:  # noqa: BLE001 - whatever failed, the child must not run
        os.write(status_fd, json.dumps({"error": f"sandbox: forked child: {type(e).__name__}: {e}"}).encode())
        os._exit(125)
    os.closerange(max(status_fd, ruleset) + 1, 1 << 20)  # one close_range(2) call
    try:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        # Only the processes: no /proc/sys, kallsyms or other system files
        # (kernels before 5.8 know no subset=pid: the whole /proc then).
        try:
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "subset=pid,hidepid=invisible")
        except OSError:
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, None)
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f"mode=0700,size={limits['tmpBytes']}")
        _check(_libc.sethostname(b"sandbox", 7), "sethostname")
        os.chdir("/tmp")
        if session and cfg["cpuRlimit"]:
            # A session lives long: where a cgroup counts its CPU time, the
            # host's watch holds each of its executions instead. A keeper's
            # programs each lower their own.
            _lower_rlimit(resource.RLIMIT_CPU, limits["cpuSeconds"], limits["cpuSeconds"] + 1)
        _lower_rlimit(resource.RLIMIT_FSIZE, limits["fileSizeBytes"], limits["fileSizeBytes"])
        _lower_rlimit(resource.RLIMIT_NOFILE, limits["openFiles"], limits["openFiles"])
        _lower_rlimit(resource.RLIMIT_CORE, 0, 0)
        _drop_capabilities()
        _prctl(PR_SET_NO_NEW_PRIVS, 1)
        if ruleset >= 0:
            _landlock_restrict(ruleset, ll)
        _seccomp(cfg["seccomp"])
    except Exception as e:  # noqa: BLE001 - whatever failed, the child must not run
        os.write(status_fd, json.dumps({"error": f"sandbox: forked child: {type(e).__name__}: {e}"}).encode())
        os._exit(125)
    os.write(status_fd, b'{"started":true}')
    os.close(status_fd)
    if not session:
        _keeper.keep(cfg["limits"])
    _reseed()
    _stay_init()
    _worker.serve(True)
    sys.stdout.flush()
    os._exit(0)


def _stay_init() -> None:
    """A session lives long, so its PID 1 stays behind as the namespace's
    init, as a spawned sandbox's does: it reaps every process orphaned there
    (Python would leave them zombies, each counted against the session's
    processes limit until the session ends), and the runtime runs in its
    child, which alone returns. PID 1 holds no file and ends as the runtime
    ended; the kernel then ends the rest of the namespace."""
    runtime = os.fork()
    if runtime == 0:
        return
    # PID 1 gets only the signals it handles: Python's SIGINT handler would
    # let a program's SIGINT end the session.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.closerange(0, 1 << 20)
    while True:
        try:
            pid, st = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == runtime:
            code = os.waitstatus_to_exitcode(st)
            os._exit(code if code >= 0 else 128 - code)


def _clone_below_tmp(read_paths: list[str]) -> list[tuple[str, int]]:
    """Detached copies of the read paths the template mirrored below its
    /tmp, which the child's own /tmp will cover."""
    kept: list[tuple[str, int]] = []
    for path in sorted(read_paths):  # ancestors first
        if any(path.startswith(k + "/") for k, _ in kept):
            continue  # visible through a kept ancestor already
        if path.startswith("/tmp/"):
            fd = _check(
                _libc.syscall(_NR_OPEN_TREE, -100, path.encode(), OPEN_TREE_CLONE | AT_RECURSIVE | os.O_CLOEXEC),
                f"open_tree {path}",
            )
            kept.append((path, fd))
    return kept


def _own_tmp(kept: list[tuple[str, int]], size: int, owner: int) -> None:
    """Mount the child's own /tmp over the template's, putting back the
    read paths below it (cloned by _clone_below_tmp)."""
    # noexec, as the spawned sandbox's: nothing the program writes runs.
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f"mode=0700,size={size},uid={owner},gid={owner}")
    # Mount points are the owner's: the child was cloned with its host uid
    # as its effective (and so file system) uid, which is owner inside.
    for path, fd in kept:
        if os.path.isdir(f"/proc/self/fd/{fd}"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o644))
        _check(_libc.syscall(_NR_MOVE_MOUNT, fd, b"", -100, path.encode(), MOVE_MOUNT_F_EMPTY_PATH), f"move_mount {path}")
        os.close(fd)


def _reseed() -> None:
    """What a fork copies but must differ per child: `random` reseeds itself
    (os.register_at_fork); numpy's global generator gets a whole MT19937 key
    from os.urandom (seed() copies ~70 more pages per child, 0.3 ms)."""
    mtrand = sys.modules.get("numpy.random.mtrand")  # not imported yet: numpy seeds it then
    if mtrand is not None:
        key = sys.modules["numpy"].frombuffer(os.urandom(624 * 4), "uint32")
        mtrand.set_state(("MT19937", key, 624, 0, 0.0))  # the next draw regenerates; no cached Gaussian


# Each child's status socket, by pid, until it has been reaped and reported.
_children: dict[int, int] = {}


def _report(pid: int, st: int, ru: resource.struct_rusage, spent: bool = False) -> None:
    status = _children.pop(pid, None)
    if status is None:
        return  # an orphan of a child's namespace, reparented here: nothing to tell
    exit: dict[str, int | bool] = {"code": -1, "signal": 0, "cpuNanos": int((ru.ru_utime + ru.ru_stime) * 1e9), "maxRssKiB": ru.ru_maxrss}
    if spent:
        exit["spent"] = True
    if os.WIFEXITED(st):
        exit["code"] = os.WEXITSTATUS(st)
    elif os.WIFSIGNALED(st):
        exit["signal"] = os.WTERMSIG(st)
    try:
        os.write(status, json.dumps({"exit": exit}).encode())
    except OSError:
        pass  # the host gave up on it
    os.close(status)


def _reap(*_: object) -> None:
    while True:
        try:
            pid, st, ru = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _report(pid, st, ru)


def _own(uid: int) -> None:
    """Set the template's effective uid and gid to uid, its capabilities
    (CAP_SETUID, CAP_SETGID) kept effective, or back to root's with uid 0.
    A user namespace cloned as uid belongs to uid: the kernel charges what
    it counts per user (inotify, pending signals, message queue bytes...)
    of everything inside to uid instead of root, and only its owner (the
    template lacks CAP_SYS_ADMIN) may write its maps. The real and saved
    ids stay root's, so the template may always become root again."""
    if uid == 0:
        os.setresuid(-1, 0, -1)  # the permitted capabilities become effective again
        os.setresgid(-1, 0, -1)
        return
    os.setresgid(-1, uid, -1)
    os.setresuid(-1, uid, -1)
    hdr = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    _check(_libc.syscall(_NR["capget"], ctypes.byref(hdr), ctypes.byref(data)), "capget")
    for d in data:
        d.effective = d.permitted
    _check(_libc.syscall(_NR["capset"], ctypes.byref(hdr), ctypes.byref(data)), "capset")
    # The uid change made the template (and so the child to come) not
    # dumpable, which would hide the child's /proc files from the template
    # (hidepid) while it writes the maps: it was dumpable before.
    _prctl(PR_SET_DUMPABLE, 1)


def _start_child(cfg: dict[str, Any], req: dict[str, Any], status: int, fds: list[int], cgroup_fds: list[int]) -> None:
    """Clone the program straight into new user, PID, mount, IPC, UTS,
    cgroup (and network) namespaces, owned by its host uid; give it its
    uid/gid maps and cgroups before it runs; hand the host its pidfd. The
    program waits on a pipe until all of that is done."""
    uid, session = req["uid"], bool(req.get("session"))
    # The cgroup namespace comes later, from the child itself: its root is
    # the cgroup the child is in when it is made, which must be its own.
    flags = CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | signal.SIGCHLD
    if not cfg["network"]:
        flags |= CLONE_NEWNET
    go_r, go_w = os.pipe()
    # SIGCHLD waits until the child is registered: a child that fails at
    # once must still find its status socket to report on.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    try:
        try:
            _own(uid)
        except OSError as e:
            _own(0)
            os.close(go_r)
            os.close(go_w)
            os.write(status, json.dumps({"error": f"sandbox: template: become uid {uid}: {e}"}).encode())
            return
        _pythonapi.PyOS_BeforeFork()
        pid = _libc.syscall(_NR["clone"], ctypes.c_ulong(flags), 0, 0, 0, 0)
        err = ctypes.get_errno()
        if pid == 0:
            _pythonapi.PyOS_AfterFork_Child()
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(go_w)
            try:
                _child(cfg, status, fds, go_r, session)
            finally:
                os._exit(1)  # whatever escaped, a child never returns into the template's loop
        _pythonapi.PyOS_AfterFork_Parent()
        os.close(go_r)
        try:
            try:
                if pid < 0:
                    raise OSError(err, f"clone: {os.strerror(err)}")
                _children[pid] = os.dup(status)
                inner = cfg["sandboxId"]
                _write(f"/proc/{pid}/uid_map", f"{inner} {uid} 1")
                _write(f"/proc/{pid}/gid_map", f"{inner} {uid} 1")
            finally:
                try:
                    _own(0)
                except OSError:
                    os._exit(1)  # a template that cannot be root again must not go on
            for fd in cgroup_fds:
                os.write(fd, str(pid).encode())
            pidfd = os.pidfd_open(pid)
            try:
                send_fd(status, json.dumps({"pid": pid}).encode(), pidfd)
            finally:
                os.close(pidfd)
            os.write(go_w, b"g")
        except Exception as e:  # noqa: BLE001 - the child must not run half set up
            if pid > 0:
                os.kill(pid, signal.SIGKILL)
            try:
                os.write(status, json.dumps({"error": f"sandbox: template: {type(e).__name__}: {e}"}).encode())
            except OSError:
                pass  # the host gave up on this child already
        finally:
            os.close(go_w)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})


def _child(cfg: dict[str, Any], status: int, fds: list[int], go: int, session: bool) -> NoReturn:
    """The program before it locks itself down: wait for its maps and
    cgroups, become the unprivileged uid inside, then _program."""
    try:
        if os.read(go, 1) != b"g":
            os._exit(125)  # the template could not set it up, and said so
        os.close(go)
        _check(_libc.unshare(CLONE_NEWCGROUP), "unshare cgroup namespace")
        inner = cfg["sandboxId"]
        # Own /tmp first, while the child still holds the capabilities of
        # its namespace that mounting takes.
        _own_tmp(_clone_below_tmp(cfg["readPaths"]), cfg["limits"]["tmpBytes"], inner)
        os.setgroups([])
        os.setresgid(inner, inner, inner)
        os.setresuid(inner, inner, inner)
        # A uid change makes a process non-dumpable, which makes its
        # /proc/self files root's: a program could not read its own
        # environ or status. A spawned program is dumpable too (exec).
        _prctl(PR_SET_DUMPABLE, 1)
    except Exception as e:  # noqa: BLE001 - whatever failed, the child must not run
        os.write(status, json.dumps({"error": f"sandbox: forked child: {type(e).__name__}: {e}"}).encode())
        os._exit(125)
    _program(cfg, status, fds, session)


def main(preload: list[str]) -> int:
    ctl = socket.socket(fileno=3)
    cfg = json.loads(ctl.recv(1 << 20))
    cfg["seccomp"] = [base64.b64decode(p) for p in cfg["seccomp"]]
    if cfg["landlock"]["abi"]:
        try:
            _shared_rules.extend(_prepare_rules(cfg["landlock"], cfg["readPaths"]))
        except OSError as e:
            ctl.send(json.dumps({"error": f"template landlock rules: {e}"}).encode())
            return 1
    own_filter = [base64.b64decode(p) for p in cfg.pop("templateSeccomp")]
    # warm() names a failing preload module on stderr (the host maps that
    # line to the config field): keep it for the answer.
    real_stderr, sys.stderr = sys.stderr, io.StringIO()
    try:
        _worker.warm(preload)
    except BaseException as e:  # noqa: BLE001 - any failure of a preload is reported
        said = sys.stderr.getvalue().strip()
        ctl.send(json.dumps({"error": said or f"preload failed: {type(e).__name__}: {e}"}).encode())
        return 1
    finally:
        sys.stderr = real_stderr
    # A session's child imports it as it starts: once here instead.
    from cyrnel import _display  # noqa: F401

    threads = os.listdir("/proc/self/task")
    if len(threads) > 1:
        threading = sys.modules.get("threading")
        if threading is not None and len(threading.enumerate()) > 1:
            names = sorted(t.name for t in threading.enumerate() if t is not threading.main_thread())
        else:  # started from C: only the kernel knows them
            names = sorted(open(f"/proc/self/task/{t}/comm").read().strip() for t in threads if int(t) != os.getpid())
        ctl.send(
            json.dumps(
                {
                    "error": f"the preload list {list(preload)} left {len(threads) - 1} thread(s) running ({', '.join(names)}): "
                    "a forked child would inherit their locks without them; preload only modules that start no threads at import"
                }
            ).encode()
        )
        return 1
    signal.signal(signal.SIGCHLD, _reap)
    # What the template built is never collected again: a collection in a
    # child would touch every object and copy the page it lives on.
    gc.collect()
    gc.freeze()
    try:
        _seccomp(own_filter)  # no_new_privs is set: the helper did before exec
    except OSError as e:
        ctl.send(json.dumps({"error": f"template seccomp: {e}"}).encode())
        return 1
    ctl.send(b'{"ready":true}')
    sys.stdout.flush()
    sys.stderr.flush()
    while True:
        msg, high = receive(ctl, 64)
        if not msg:
            break  # the host drains this template
        req = json.loads(msg)
        n = 3 + req["extra"]
        _start_child(cfg, req, high[0], high[1:n], high[n:])
        for fd in high:
            os.close(fd)
    # Drained: wait for the last child, whose namespaces end with this one.
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    while True:
        try:
            pid, st, ru = os.wait4(-1, 0)
        except ChildProcessError:
            return 0
        _report(pid, st, ru)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
