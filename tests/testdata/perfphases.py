"""Split perf samples of a cyrnel server, its forking template and the
template's children by phase (docs/benchmarks.md, "Where the time goes").

While BenchmarkCPUSplit runs (a large CYRNEL_CPUSPLIT_N, e.g. 4000), as root:

    S=<the cyrnel server's pid>; T=$(cat /proc/$S/task/*/children)
    perf record -g -F 1999 -p $S,$T -o perf.data -- sleep 10
    perf script -i perf.data -F comm,pid,tid,ip,sym > perf.txt
    python3 perfphases.py perf.txt $S $T

perf follows the children the template forks while it records. Each sample
goes to the first phase, in the order below, that any frame of its stack
belongs to: the innermost owner of the work (a row write made while serving
HTTP counts as a write).
"""

import collections
import sys


def read_samples(path):
    """Yield (pid, frames) from `perf script -F comm,pid,tid,ip,sym`."""
    pid, frames = None, []
    with open(path) as f:
        for line in f:
            if not line.strip():
                if pid is not None:
                    yield pid, frames
                pid, frames = None, []
            elif not line.startswith((" ", "\t")):
                pid = int(line.split()[1].split("/")[0])
            else:
                parts = line.split(None, 1)
                frames.append(parts[1].strip() if len(parts) > 1 else "?")
    if pid is not None:
        yield pid, frames


def has(frames, *keys):
    return any(k in f for f in frames for k in keys)


def syscall(frames):
    names = [f for f in frames if f.startswith(("__x64_sys_", "__do_sys_", "ksys_"))]
    return names[-1] if names else "?"


SERVER = [
    ("process-row writes (host/store, SQLite)", ("host/store", "sqlite3", "database/sql")),
    ("environment (envs/: pool, fork request, cgroups, pipes)", ("cyrnel/envs/",)),
    ("process manager (host/process)", ("host/process",)),
    ("HTTP and JSON", ("net/http", "huma", "encoding/json", "host/api", "internal/poll")),
    ("Go GC", ("gcBgMarkWorker", "gcDrain", "bgsweep", "bgscavenge", "mallocgc", "gcAssist")),
    ("Go scheduler, spinning, futex", ("runtime.schedule", "findRunnable", "runtime.mcall", "sysmon", "futex")),
]

SANDBOX = [
    ("teardown (exit)", ("do_exit", "exit_mmap", "exit_mm", "release_task")),
    ("clone and new namespaces", ("copy_process", "kernel_clone")),
    ("namespaces (unshare, uid maps)", ("unshare", "proc_uid_map_write", "proc_gid_map_write", "setns")),
    ("Landlock", ("landlock",)),
    ("seccomp", ("seccomp",)),
    ("cgroups", ("cgroup",)),
    ("mounts and the private root", ("do_mount", "path_mount", "pivot_root", "move_mount", "umount", "mount_setattr", "open_tree", "fsmount", "fsopen", "fsconfig")),
    ("copy-on-write page faults", ("exc_page_fault",)),
]


def phase(frames, table):
    for name, keys in table:
        if has(frames, *keys):
            return name
    if table is SANDBOX:
        if has(frames, "do_syscall_64"):
            return "other syscalls: " + syscall(frames)
        return "interpreter, user space"
    return "other"


def main(path, server, template):
    groups = {"server": collections.Counter(), "template": collections.Counter(), "children": collections.Counter()}
    for pid, frames in read_samples(path):
        if pid == server:
            groups["server"][phase(frames, SERVER)] += 1
        else:
            groups["template" if pid == template else "children"][phase(frames, SANDBOX)] += 1
    total = sum(sum(c.values()) for c in groups.values())
    for name, counts in groups.items():
        n = sum(counts.values())
        print(f"== {name}: {n} samples, {100 * n / max(total, 1):.1f} % of the tree")
        for what, k in counts.most_common(15):
            print(f"  {100 * k / n:5.1f} %  {what}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
