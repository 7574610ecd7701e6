"""JSON-RPC 2.0 over the protocol pipes (fd 3: from the host, fd 4: to it)
and the main thread's own pair (fd 5: answers, fd 6: its calls).

One reader thread owns fd 3 once started (by a session, or by the first
call answered there): responses wake the caller waiting on them, requests
from the host go to the main thread's queue. Before that, the main thread
reads its requests itself. Writes are serialised
by a lock so messages never interleave. When fd 3 reaches end-of-file every
pending call fails, and so does every later one: nothing can answer them.

A blocking call from the main thread, which runs the program, goes over fds
5 and 6 instead and reads its own answer: handing the answer from the
reader thread to the waiting caller costs a thread wake-up and the GIL,
about as much as the pipe round trip itself.
"""

from __future__ import annotations

import json
import os
import queue
import threading

TYPE_CHECKING = False  # typing costs every interpreter an import; mypy reads it as True
if TYPE_CHECKING:
    import asyncio
    from typing import Any, Callable

READ_FD = 3
WRITE_FD = 4
CALL_READ_FD = 5
CALL_WRITE_FD = 6

# The code of an RPCError raised locally when the host can no longer answer.
DISCONNECTED = "disconnected"


class RPCError(Exception):
    """An error answer from the host, or no answer at all (code
    ``DISCONNECTED``)."""

    def __init__(self, code: int | str | None, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


class _Pending:
    __slots__ = ("event", "result", "error", "loop", "future")

    def __init__(
        self, loop: asyncio.AbstractEventLoop | None = None, future: asyncio.Future[Any] | None = None
    ) -> None:
        self.event = threading.Event()
        self.result: Any = None
        self.error: RPCError | None = None
        self.loop = loop
        self.future = future


# The bytes of data one message carries when it carries them in parts
# (stdout, files): 32 KiB as base64, within the allowance the host gives a
# message beyond the execution's output limit (docs/protocol.md).
PART = 24 << 10

# One encoder: json.dumps with options builds a new one per call. UTF-8
# rather than \u escapes: a message's size is what the host counts against
# the output limit, so text costs its UTF-8 bytes, as on stdout.
_encoder = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False)


def _encode(msg: dict[str, Any]) -> bytes:
    # A lone surrogate (a name decoded with surrogateescape) cannot be UTF-8:
    # it becomes the \u escape ensure_ascii would have written.
    return _encoder.encode(msg).encode("utf-8", "backslashreplace") + b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _answer(msg: dict[str, Any]) -> tuple[Any, RPCError | None]:
    """The result of an answer, or the error it carries."""
    err = msg.get("error")
    if isinstance(err, dict):
        return None, RPCError(err.get("code"), str(err.get("message", "error")), err.get("data"))
    if err is not None:
        return None, RPCError(None, str(err))
    return msg.get("result"), None


class _Lines:
    """The lines of a pipe, read with os.read: fd 3 (the host's messages)
    and fd 5 (the answers to the main thread's calls). A last line without
    its newline is still a line; a read that fails (the program closed the
    fd) is end-of-file."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buf = bytearray()

    def next(self) -> bytes | None:
        """The next line without its newline, or None at end-of-file."""
        while True:
            i = self._buf.find(b"\n")
            if i >= 0:
                line = bytes(self._buf[:i])
                del self._buf[: i + 1]
                return line
            try:
                chunk = os.read(self._fd, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                line, self._buf = bytes(self._buf), bytearray()
                return line or None
            self._buf += chunk


class _Direct:
    """The main thread's calls on its own pipes, each answer read by the
    caller itself. An answer left behind by an interrupted call (a cancel's
    KeyboardInterrupt) is skipped by the next call: ids never repeat.

    Once the pair is broken (its end-of-file, a failed write, or a write
    interrupted partway, which leaves the host half a line) the main
    thread's later calls go over fds 3 and 4; the call that found it broken
    fails, since the host may have served it already. So do calls made
    inside a call and, for good, those of a forked child."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self._lines = _Lines(read_fd)
        self._write_fd = write_fd
        self._next_id = 0
        self.broken = False
        # A call is under way: a call made inside it (a signal handler,
        # __del__) would take its answer or cut its line in two.
        self.busy = False
        # A forked child shares the pipes and the ids: its calls would take
        # the parent's answers.
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        self.broken = True

    def call(self, method: str, params: Any) -> Any:
        self.busy = True
        try:
            return self._call(method, params)
        finally:
            self.busy = False

    def _call(self, method: str, params: Any) -> Any:
        self._next_id += 1
        req_id = self._next_id
        data = _encode({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})
        try:
            _write_all(self._write_fd, data)
        except OSError:
            self.broken = True  # the host's end is gone, or the program closed fd 6
            raise _disconnected() from None
        except BaseException:
            self.broken = True  # interrupted: how much of the line went is unknown
            raise
        while True:
            try:
                msg = json.loads(self._line())
            except ValueError:
                continue
            if isinstance(msg, dict) and msg.get("id") == req_id:
                result, err = _answer(msg)
                if err is not None:
                    raise err
                return result

    def _line(self) -> bytes:
        line = self._lines.next()
        if line is None:
            self.broken = True
            raise _disconnected()
        return line


class Connection:
    def __init__(
        self,
        read_fd: int = READ_FD,
        write_fd: int = WRITE_FD,
        call_fds: tuple[int, int] | None = (CALL_READ_FD, CALL_WRITE_FD),
    ) -> None:
        self._lines = _Lines(read_fd)
        self._write_fd = write_fd
        # The thread that made the connection runs the programs.
        self._main = threading.get_ident()
        self._direct = _Direct(*call_fds) if call_fds is not None else None
        self._write_lock = threading.Lock()
        self._id_lock = threading.Lock()
        self._next_id = 0
        self._pending: dict[int, _Pending] = {}
        self._closed = False  # fd 3 reached end-of-file (under _id_lock)
        # The host's requests, once the reader thread reads them.
        self.requests: queue.Queue[dict[str, Any] | None] | None = None
        # Called on the reader thread when the host asks to stop the running
        # program: the main thread is busy running it, so the queue would
        # only be read after the program ends.
        self.on_cancel: Callable[[Any], None] | None = None
        # The reader thread starts when something needs it (a session, a
        # call answered on fd 3): until then the main thread reads its
        # requests itself, which spares a one-shot interpreter a thread and
        # a hand-off per request (docs/protocol.md).
        self._thread: threading.Thread | None = None
        self._main_reading = False  # the main thread is reading fd 3 itself
        self._start_lock = threading.Lock()

    def start(self) -> None:
        """Start the reader thread, once. A call made while the main thread
        reads fd 3 itself (a program's thread left running after its
        one-shot execution answered) cannot be answered."""
        with self._start_lock:
            if self._thread is not None:
                return
            if self._main_reading:
                raise _disconnected()
            self.requests = queue.Queue()
            self._thread = threading.Thread(target=self._read_loop, name="cyrnel-rpc", daemon=True)
            self._thread.start()

    def next_request(self) -> dict[str, Any] | None:
        """The host's next request, or None once fd 3 has ended: from the
        reader thread's queue once it runs, else read on this thread."""
        with self._start_lock:
            direct = self._thread is None
            self._main_reading = direct
        if not direct:
            assert self.requests is not None  # made before the thread
            return self.requests.get()
        try:
            while (line := self._lines.next()) is not None:
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                # No call is pending while nothing else reads (a call starts
                # the reader) and a one-shot program is never cancelled: only
                # a request matters.
                if isinstance(msg, dict) and "method" in msg and "id" in msg:
                    return msg
        finally:
            with self._start_lock:
                self._main_reading = False
        with self._id_lock:
            self._closed = True
        return None

    def _send(self, msg: dict[str, Any]) -> None:
        data = _encode(msg)
        with self._write_lock:
            _write_all(self._write_fd, data)

    def notify(self, method: str, params: Any) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def reply(self, req_id: Any, result: Any = None, error: dict[str, Any] | None = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "id": req_id}
        if error is not None:
            msg["error"] = error
        else:
            msg["result"] = result
        self._send(msg)

    def _register(self, pending: _Pending) -> int:
        self.start()  # the answer arrives on fd 3
        with self._id_lock:
            if self._closed:
                raise _disconnected()
            self._next_id += 1
            req_id = self._next_id
            self._pending[req_id] = pending
        return req_id

    def call(self, method: str, params: Any) -> Any:
        """Blocking call; raises RPCError on an error answer."""
        d = self._direct
        if d is not None and not d.broken and not d.busy and threading.get_ident() == self._main:
            return d.call(method, params)
        p = _Pending()
        req_id = self._register(p)
        self._send({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})
        p.event.wait()
        if p.error is not None:
            raise p.error
        return p.result

    def acall(self, method: str, params: Any) -> asyncio.Future[Any]:
        """Awaitable call: returns an asyncio future resolved by the reader."""
        import asyncio

        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        req_id = self._register(_Pending(loop, fut))
        self._send({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})
        return fut

    def _resolve(self, msg: dict[str, Any]) -> None:
        with self._id_lock:
            p = self._pending.pop(msg.get("id"), None)  # type: ignore[arg-type]
        if p is None:
            return
        p.result, p.error = _answer(msg)
        _wake(p)

    def _read_loop(self) -> None:
        assert self.requests is not None  # made before the thread
        while (line := self._lines.next()) is not None:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if not isinstance(msg, dict):
                continue
            if msg.get("method") == "cancel" and "id" not in msg:
                params = msg.get("params")
                if self.on_cancel is not None and isinstance(params, dict):
                    self.on_cancel(params.get("eid"))
            elif "method" in msg:
                self.requests.put(msg)
            else:
                self._resolve(msg)
        # The host closed the pipe: nothing more will arrive, so nothing
        # waiting for an answer may wait on.
        with self._id_lock:
            self._closed = True
            pending, self._pending = self._pending, {}
        for p in pending.values():
            p.error = _disconnected()
            _wake(p)
        self.requests.put(None)


def _disconnected() -> RPCError:
    return RPCError(DISCONNECTED, "the connection to the cyrnel host is closed: the call got no answer")


def _wake(p: _Pending) -> None:
    if p.future is not None and p.loop is not None:
        try:
            p.loop.call_soon_threadsafe(_settle, p)
        except RuntimeError:
            pass  # its event loop is closed: nobody awaits the answer
    else:
        p.event.set()


def _settle(p: _Pending) -> None:
    assert p.future is not None
    if p.future.done():
        return
    if p.error is not None:
        p.future.set_exception(p.error)
    else:
        p.future.set_result(p.result)


conn: Connection | None = None  # set by the worker before user code runs


def output(patch: dict[str, Any]) -> None:
    """Merge ``patch`` (a JSON object) into the process's structured output.

    Later keys overwrite earlier ones; new keys are added.
    """
    if not isinstance(patch, dict):
        raise TypeError(f"cyrnel.output() takes a dict, not {type(patch).__name__}")
    if conn is None:
        raise RuntimeError("cyrnel.output() is only available inside a cyrnel process")
    try:
        conn.notify("output", {"patch": patch})
    except (TypeError, ValueError) as e:
        raise TypeError(f"cyrnel.output(): value is not JSON-serialisable: {e}") from None


def display(obj: Any) -> None:
    """Show ``obj`` as a notebook would: record its MIME bundle (an image for
    a matplotlib figure, an HTML table for a DataFrame, ``text/plain`` for
    anything) with the process."""
    send_display("display", obj)


def send_display(kind: str, obj: Any) -> None:
    from cyrnel import _display

    if conn is None:
        raise RuntimeError("cyrnel.display() is only available inside a cyrnel process")
    conn.notify("display", {"kind": kind, "data": _display.bundle(obj)})
