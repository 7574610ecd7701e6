"""A keeper: a child of the template that stays, locked down in its
namespaces and cgroups, and forks one execution's interpreter at a time
from itself (envs/sandbox/keeper.go has the protocol, docs/sandbox.md,
"Keepers", the design)."""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import socket
import sys

from cyrnel import _template, _worker

TYPE_CHECKING = False  # typing costs every interpreter an import; mypy reads it as True
if TYPE_CHECKING:
    from typing import NoReturn

    # _settings(): sched_attr, I/O priority, CPU affinity, rlimits.
    Settings = tuple[bytes, int, set[int], tuple[tuple[int, int], ...]]


def keep(limits: dict[str, int]) -> NoReturn:
    """A keeper: PID 1 of namespaces and cgroups it keeps, locked down,
    forking one program at a time from itself (docs/sandbox.md, "Keepers").
    Each program is a fresh copy of the template's interpreter; once it
    ends, the keeper kills what it left, empties /tmp and /dev/shm and
    checks the IPC namespace and its own settings, then reports the
    program's end. Where that cannot be done, or the program changed what
    it should not have, it says so ("spent") and exits: the host never
    gives it another program. It ends when the host closes its control
    socket (fd 3)."""
    ctl = socket.socket(fileno=3)
    # A program runs as the keeper's uid: it must not ptrace it nor read
    # its /proc files, and a signal it sends PID 1 must not end it.
    _template._prctl(_template.PR_SET_DUMPABLE, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    skeleton = _tree("/tmp") | _tree("/dev/shm")
    settings = _settings()
    while True:
        msg, high = _template.receive(ctl, 16)
        if not msg:
            os._exit(0)
        status, files = high[0], high[1:]
        try:
            pid = os.fork()
        except OSError as e:
            os.write(status, json.dumps({"error": f"sandbox: keeper: fork: {e}"}).encode())
            os._exit(1)
        if pid == 0:
            _run(files, limits)
        for fd in files:
            os.close(fd)
        if not _follow(pid, status, skeleton, settings):
            os._exit(0)


def _run(files: list[int], limits: dict[str, int]) -> NoReturn:
    """A keeper's program: its files as fds 1, 2, 3…; its own CPU limit
    (the keeper has none: it lives long)."""
    try:
        for target, fd in enumerate(files, start=1):
            os.dup2(fd, target)
        os.closerange(len(files) + 1, 1 << 20)
        _template._lower_rlimit(resource.RLIMIT_CPU, limits["cpuSeconds"], limits["cpuSeconds"] + 1)
        _template._prctl(_template.PR_SET_DUMPABLE, 1)  # its own /proc/self files are its own
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the keeper's is ignored
        _template._reseed()
    except BaseException:  # noqa: BLE001 - a program half set up must not run
        os._exit(125)
    _worker.serve(False)
    sys.stdout.flush()
    os._exit(0)


def _follow(pid: int, status: int, skeleton: dict[str, tuple[int, int, int] | None], settings: Settings) -> bool:
    """Report the program on its status socket, wait for it, kill and reap
    what it left, clean up; whether the keeper may take another."""
    try:
        pidfd = os.pidfd_open(pid)
        try:
            # Locked down already: its pidfd and its start in one message.
            _template.send_fd(status, b'{"pid":%d,"started":true}' % pid, pidfd)
        finally:
            os.close(pidfd)
    except OSError:
        pass  # the host gave up on it: the program reads end-of-file and ends
    _, st, ru = os.wait4(pid, 0)
    try:
        os.kill(-1, signal.SIGKILL)  # every process of the namespace but PID 1
    except ProcessLookupError:
        pass
    while True:
        try:
            os.wait()
        except ChildProcessError:
            break
    try:
        clean = _settings() == settings and _wipe(skeleton) and _ipc_empty()
    except OSError:
        clean = False
    _template._children[pid] = status
    _template._report(pid, st, ru, spent=not clean)
    return clean


# The most entries a keeper removes after one program: more, and it retires
# instead (its namespaces and their tmpfs go with it).
_WIPE_MOST = 1024


def _tree(root: str) -> dict[str, tuple[int, int, int] | None]:
    """The paths below root when the keeper starts — the mount points of the
    read paths below /tmp and the directories leading to them — with, for
    each directory of root's file system, its mode and times to give back."""
    found: dict[str, tuple[int, int, int] | None] = {}
    todo = [root]
    dev = os.lstat(root).st_dev
    while todo:
        d = todo.pop()
        st = os.lstat(d)
        found[d] = (st.st_mode & 0o7777, st.st_atime_ns, st.st_mtime_ns)
        for entry in os.scandir(d):
            if entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_dev == dev:
                todo.append(entry.path)
            else:
                found[entry.path] = None  # a mount point: left alone
    return found


def _wipe(skeleton: dict[str, tuple[int, int, int] | None]) -> bool:
    """Remove everything a program left in /tmp and /dev/shm but the
    skeleton, and give the skeleton's directories their attributes, mode
    and times back; False if that failed or found more than _WIPE_MOST
    entries."""
    todo, dirs, seen = ["/tmp", "/dev/shm"], [], 0
    try:
        while todo:
            d = todo.pop()
            kept = d in skeleton
            os.chmod(d, 0o700)  # readable and writable, whatever the program made it
            if kept:
                for name in os.listxattr(d, follow_symlinks=False):
                    os.removexattr(d, name, follow_symlinks=False)
            dirs.append(d)
            for entry in os.scandir(d):
                seen += 1
                if seen > _WIPE_MOST:
                    return False
                if kept and entry.path in skeleton:
                    if skeleton[entry.path] is not None:
                        todo.append(entry.path)
                elif entry.is_dir(follow_symlinks=False):
                    todo.append(entry.path)
                else:
                    os.unlink(entry.path)
        # Deepest first: a directory is empty once those below it are gone.
        for d in reversed(dirs):
            attrs = skeleton.get(d)
            if attrs is None:
                os.rmdir(d)
            else:
                mode, atime, mtime = attrs
                os.chmod(d, mode)
                os.utime(d, ns=(atime, mtime))
    except Exception:  # noqa: BLE001 - whatever failed, the keeper retires
        return False
    return True


# sched_getattr, ioprio_get: x86_64 and aarch64 (the generic table).
_NR = {"x86_64": (315, 252), "aarch64": (275, 31)}[os.uname().machine]
_RLIMITS = sorted(getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_"))
# The kernel's answers, in buffers made once: a keeper runs single-threaded,
# and every object it makes between forks is a page copied again.
_ATTR = ctypes.create_string_buffer(56)  # struct sched_attr
_INFO = (ctypes.c_int * 64)()  # shm_info, msginfo, seminfo


def _settings() -> Settings:
    """What a program, as the keeper's uid, may change of the keeper (PID 1)
    though it cannot trace it: its rlimits (prlimit), its scheduling —
    policy, nice, priority, utilisation clamps (sched_setattr,
    setpriority) — its CPU affinity and its I/O priority. A later program
    would inherit them."""
    if _template._libc.syscall(_NR[0], 0, _ATTR, 56, 0) < 0:
        raise OSError(ctypes.get_errno(), "sched_getattr")
    ioprio = _template._libc.syscall(_NR[1], 1, 0)  # IOPRIO_WHO_PROCESS, self
    return (_ATTR.raw, ioprio, os.sched_getaffinity(0), tuple(map(resource.getrlimit, _RLIMITS)))


_SHM_INFO, _MSG_INFO, _SEM_INFO = 14, 12, 19


def _ipc_empty() -> bool:
    """Whether the IPC namespace holds no System V shared memory segment,
    message queue or semaphore set (a program's own to remove: the keeper
    retires). POSIX message queues are refused by seccomp."""
    if _template._libc.shmctl(0, _SHM_INFO, _INFO) < 0 or _INFO[0] != 0:  # shm_info.used_ids
        return False
    if _template._libc.msgctl(0, _MSG_INFO, _INFO) < 0 or _INFO[0] != 0:  # msginfo.msgpool: queues in use
        return False
    return bool(_template._libc.semctl(0, 0, _SEM_INFO, _INFO) >= 0 and _INFO[7] == 0)  # seminfo.semusz: sets in use
