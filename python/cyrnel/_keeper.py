"""A keeper: a child of the template that stays, locked down in its
namespaces and cgroups, and forks one execution's interpreter at a time
from itself (envs/sandbox/keeper.go has the protocol, docs/sandbox.md,
"Keepers", the design)."""

from __future__ import annotations

import ctypes
import fcntl
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


def keep(limits: dict[str, int], reuse: bool) -> NoReturn:
    """A keeper: PID 1 of namespaces and cgroups it keeps, locked down,
    forking one program at a time from itself (docs/sandbox.md, "Keepers").
    Each program is a fresh copy of the template's interpreter; once it
    ends, the keeper kills what it left, empties /tmp and /dev/shm and
    checks the IPC namespace, then reports the program's end. Where that
    cannot be done, or without Landlock (nothing else keeps a program from
    POSIX message queues, which nothing can list), it says so ("spent")
    and exits: the host never gives it another program. It ends when the
    host closes its control socket (fd 3)."""
    ctl = socket.socket(fileno=3)
    # A program runs as the keeper's uid: it must not ptrace it nor read
    # its /proc files, and a signal it sends PID 1 must not end it.
    _template._prctl(_template.PR_SET_DUMPABLE, 0)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    skeleton = _tree("/tmp") | _tree("/dev/shm")
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(ctl, 4096, 16)
        except InterruptedError:
            continue
        if not msg:
            os._exit(0)
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _template._HIGH_FD) for fd in fds]
        for fd in fds:
            os.close(fd)
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
        if not _follow(pid, status, skeleton, reuse):
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
        _template._reseed()
    except BaseException:  # noqa: BLE001 - a program half set up must not run
        os._exit(125)
    _worker.serve(False)
    sys.stdout.flush()
    os._exit(0)


def _follow(pid: int, status: int, skeleton: set[str], reuse: bool) -> bool:
    """Report the program on its status socket, wait for it, kill and reap
    what it left, clean up; whether the keeper may take another."""
    try:
        pidfd = os.pidfd_open(pid)
        try:
            socket.send_fds(socket.socket(fileno=os.dup(status)), [json.dumps({"pid": pid}).encode()], [pidfd])
        finally:
            os.close(pidfd)
        os.write(status, b'{"started":true}')
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
    clean = reuse and _wipe(skeleton) and _ipc_empty()
    _template._children[pid] = status
    _template._report(pid, st, ru, spent=not clean)
    return clean


# The most entries a keeper removes after one program: more, and it retires
# instead (its namespaces and their tmpfs go with it).
_WIPE_MOST = 1024


def _tree(root: str) -> set[str]:
    """The paths below root when the keeper starts: the mount points of the
    read paths below /tmp and the directories leading to them."""
    found = {root}
    dev = os.lstat(root).st_dev
    for entry in os.scandir(root):
        found.add(entry.path)
        if entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_dev == dev:
            found |= _tree(entry.path)
    return found


def _wipe(skeleton: set[str]) -> bool:
    """Remove everything a program left in /tmp and /dev/shm but the
    skeleton, and give both their mode back; False if that failed."""
    todo, seen = ["/tmp", "/dev/shm"], 0
    try:
        for d in todo:
            os.chmod(d, 0o700)
        while todo:
            d = todo.pop()
            dev = os.lstat(d).st_dev
            for entry in os.scandir(d):
                seen += 1
                if seen > _WIPE_MOST:
                    return False
                if entry.path in skeleton:
                    # A read path's mount point is left alone; the
                    # directories leading to one are searched.
                    if entry.is_dir(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_dev == dev:
                        todo.append(entry.path)
                elif entry.is_dir(follow_symlinks=False):
                    _remove_tree(entry.path)
                else:
                    os.unlink(entry.path)
    except OSError:
        return False
    return True


def _remove_tree(path: str) -> None:
    """Remove a directory a program made, whatever modes it gave it."""
    os.chmod(path, 0o700)
    for entry in os.scandir(path):
        if entry.is_dir(follow_symlinks=False):
            _remove_tree(entry.path)
        else:
            os.unlink(entry.path)
    os.rmdir(path)


_SHM_INFO, _MSG_INFO, _SEM_INFO = 14, 12, 19


def _ipc_empty() -> bool:
    """Whether the IPC namespace holds no System V shared memory segment,
    message queue or semaphore set (a program's own to remove: the keeper
    retires). POSIX message queues are Landlock's to refuse (the keeper
    runs one program only without it)."""
    buf = ctypes.create_string_buffer(256)
    ints = ctypes.cast(buf, ctypes.POINTER(ctypes.c_int))
    if _template._libc.shmctl(0, _SHM_INFO, buf) < 0 or ints[0] != 0:  # shm_info.used_ids
        return False
    if _template._libc.msgctl(0, _MSG_INFO, buf) < 0 or ints[0] != 0:  # msginfo.msgpool: queues in use
        return False
    return bool(_template._libc.semctl(0, 0, _SEM_INFO, buf) >= 0 and ints[7] == 0)  # seminfo.semusz: sets in use
