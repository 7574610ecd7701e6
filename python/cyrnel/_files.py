"""A session's workspace (its working directory), served to the host: the
host's file routes reach it through these requests, answered between
executions. Paths stay inside the workspace: the host validates names, and
here every path is resolved (symlinks included) and refused outside it."""

from __future__ import annotations

import binascii
import os

from cyrnel import _rpc

TYPE_CHECKING = False  # typing costs an import; mypy reads it as True
if TYPE_CHECKING:
    from typing import Any, Callable

# JSON-RPC error codes of a file request.
NOT_FOUND = 2
INVALID = 3


class FileError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _root() -> str:
    return os.path.realpath(os.getcwd())


def _resolve(path: Any) -> str:
    if not isinstance(path, str) or not path or path.startswith("/"):
        raise FileError(INVALID, "path must be relative to the workspace")
    root = _root()
    full = os.path.realpath(os.path.join(root, path))
    if not full.startswith(root + os.sep):
        raise FileError(INVALID, f"{path}: outside the workspace")
    return full


def write(params: dict[str, Any]) -> dict[str, Any]:
    full = _resolve(params.get("path"))
    data = binascii.a2b_base64(str(params.get("data", "")))
    os.makedirs(os.path.dirname(full), exist_ok=True)
    with open(full, "wb") as f:
        f.write(data)
    return {"size": len(data)}


def read(params: dict[str, Any]) -> dict[str, Any]:
    """At most ``chunk`` bytes of the file from ``offset``, with its size and
    modification time (the host streams a file chunk by chunk and stops if
    they change under it)."""
    full = _resolve(params.get("path"))
    if not os.path.isfile(full):
        raise FileError(NOT_FOUND, f"{params.get('path')}: no such file")
    offset, chunk = int(params.get("offset", 0)), int(params.get("chunk", 0))
    if offset < 0 or chunk <= 0:
        raise FileError(INVALID, "offset must be at least 0 and chunk positive")
    with open(full, "rb") as f:
        st = os.fstat(f.fileno())
        f.seek(offset)
        data = f.read(chunk)
    return {"data": binascii.b2a_base64(data, newline=False).decode("ascii"), "size": st.st_size, "mtimeNs": st.st_mtime_ns}


def delete(params: dict[str, Any]) -> dict[str, Any]:
    full = _resolve(params.get("path"))
    if not os.path.isfile(full):
        raise FileError(NOT_FOUND, f"{params.get('path')}: no such file")
    os.remove(full)
    return {}


def list_all(params: dict[str, Any]) -> dict[str, Any]:
    root = _root()
    limit = int(params.get("limit", 1000))
    items: list[dict[str, Any]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            full = os.path.join(dirpath, name)
            try:
                st = os.lstat(full)
            except OSError:
                continue
            if not os.path.isfile(full) or os.path.islink(full):
                continue
            items.append({"path": os.path.relpath(full, root), "size": st.st_size, "modifiedAt": st.st_mtime})
            if len(items) >= limit:
                return {"items": items, "truncated": True}
    return {"items": items, "truncated": False}


OPS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "writeFile": write,
    "readFile": read,
    "deleteFile": delete,
    "listFiles": list_all,
}


def serve(method: str, params: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The answer to a file request: (result, None) or (None, error)."""
    try:
        return OPS[method](params), None
    except FileError as e:
        return None, {"code": e.code, "message": str(e)}
    except OSError as e:
        return None, {"code": INVALID, "message": f"{params.get('path', '')}: {e.strerror}"}


# What a one-shot program's workspace may send back; the host caps it again
# (process.Limits.OutputFileBytes).
MAX_FILES = 20
MAX_BYTES = 256 << 20


def place(files: Any) -> None:
    """Write a one-shot execution's input files into the workspace."""
    for f in files if isinstance(files, list) else []:
        if isinstance(f, dict):
            write(f)


def collect(send: Callable[[str, Any], None]) -> None:
    """Send the files a one-shot program left in its workspace, as
    ``file`` notifications, within the caps; one past them is reported on
    stderr (and by the host, which counts again). Each file is read and sent
    a part at a time, never held whole."""
    with os.scandir() as entries:
        if next(entries, None) is None:
            return  # most programs leave nothing: no walk
    import sys

    total = 0
    sent = 0
    for item in list_all({"limit": MAX_FILES + 1})["items"]:
        path, size = item["path"], item["size"]
        if sent >= MAX_FILES or total + size > MAX_BYTES:
            sys.stderr.write(
                f"cyrnel: output file {path} ({size} bytes) not kept: a process keeps at most"
                f" {MAX_FILES} files and {MAX_BYTES} bytes of them\n"
            )
            sys.stderr.flush()
            continue
        try:
            fh = open(os.path.join(_root(), path), "rb")
        except OSError:
            continue
        sent += 1
        # In parts: one message to the host stays within the execution's
        # output limit, which bounds every message (docs/protocol.md).
        with fh:
            at = 0
            while True:
                data = fh.read(min(_rpc.PART, MAX_BYTES - total))
                if not data and at > 0:
                    break
                part = binascii.b2a_base64(data, newline=False).decode("ascii")
                send("file", {"path": path, "data": part, "append": at > 0})
                at += len(data)
                total += len(data)
                if not data or total >= MAX_BYTES:
                    break
