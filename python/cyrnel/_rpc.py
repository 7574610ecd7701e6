"""JSON-RPC 2.0 over the two protocol pipes (fd 3: from the host, fd 4: to it).

One reader thread owns fd 3: responses wake the caller waiting on them,
requests from the host go to the main thread's queue. Writes are serialised
by a lock so messages never interleave.
"""

import json
import os
import queue
import threading

READ_FD = 3
WRITE_FD = 4


class RPCError(Exception):
    """An error answer from the host."""

    def __init__(self, code, message, data=None):
        super().__init__(message)
        self.code = code
        self.data = data


class _Pending:
    __slots__ = ("event", "result", "error", "loop", "future")

    def __init__(self, loop=None, future=None):
        self.event = threading.Event()
        self.result = None
        self.error = None
        self.loop = loop
        self.future = future


class Connection:
    def __init__(self, read_fd=READ_FD, write_fd=WRITE_FD):
        self._reader = open(read_fd, "rb", buffering=1 << 16, closefd=False)
        self._write_fd = write_fd
        self._write_lock = threading.Lock()
        self._id_lock = threading.Lock()
        self._next_id = 0
        self._pending = {}
        self.requests = queue.Queue()
        self._thread = threading.Thread(target=self._read_loop, name="cyrnel-rpc", daemon=True)

    def start(self):
        self._thread.start()

    def _send(self, msg):
        data = json.dumps(msg, separators=(",", ":"), allow_nan=False).encode() + b"\n"
        with self._write_lock:
            view = memoryview(data)
            while view:
                n = os.write(self._write_fd, view)
                view = view[n:]

    def notify(self, method, params):
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def reply(self, req_id, result=None, error=None):
        msg = {"jsonrpc": "2.0", "id": req_id}
        if error is not None:
            msg["error"] = error
        else:
            msg["result"] = result
        self._send(msg)

    def _register(self, pending):
        with self._id_lock:
            self._next_id += 1
            req_id = self._next_id
            self._pending[req_id] = pending
        return req_id

    def call(self, method, params):
        """Blocking call; raises RPCError on an error answer."""
        p = _Pending()
        req_id = self._register(p)
        self._send({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})
        p.event.wait()
        if p.error is not None:
            raise p.error
        return p.result

    def acall(self, method, params):
        """Awaitable call: returns an asyncio future resolved by the reader."""
        import asyncio

        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        req_id = self._register(_Pending(loop, fut))
        self._send({"jsonrpc": "2.0", "id": req_id, "method": method, "params": params})
        return fut

    def _resolve(self, msg):
        with self._id_lock:
            p = self._pending.pop(msg.get("id"), None)
        if p is None:
            return
        err = msg.get("error")
        if err is not None:
            p.error = RPCError(err.get("code"), err.get("message", "error"), err.get("data"))
        else:
            p.result = msg.get("result")
        if p.future is not None:
            try:
                p.loop.call_soon_threadsafe(_settle, p)
            except RuntimeError:
                pass  # its event loop is closed: nobody awaits the answer
        else:
            p.event.set()

    def _read_loop(self):
        for line in self._reader:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "method" in msg:
                self.requests.put(msg)
            else:
                self._resolve(msg)
        # The host closed the pipe: nothing more will arrive.
        self.requests.put(None)


def _settle(p):
    if p.future.done():
        return
    if p.error is not None:
        p.future.set_exception(p.error)
    else:
        p.future.set_result(p.result)


conn = None  # set by the worker before user code runs


def output(patch):
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
