"""The interpreter's main loop: warm up, announce readiness, run one program.

The host starts the interpreter with fds 3 and 4 as the JSON-RPC pipes and
fds 1 and 2 as raw pipes for stdout and stderr. Everything costly (the
``preload`` modules, asyncio among them by default) is imported here, before
``ready``, so an execution pays none of it.
"""

from __future__ import annotations

import binascii
import builtins
import importlib
import io
import linecache
import os
import sys
import traceback

import cyrnel
from cyrnel import _files, _rpc

TYPE_CHECKING = False  # typing costs every interpreter an import; mypy reads it as True
if TYPE_CHECKING:
    from types import CodeType, TracebackType
    from typing import Any

FILENAME = "<process>"
# The runtime's own files: their frames are cut from user tracebacks.
_RUNTIME_DIR = os.path.dirname(os.path.abspath(cyrnel.__file__)) + os.sep

# ast.PyCF_ALLOW_TOP_LEVEL_AWAIT and inspect.CO_COROUTINE, stable since 3.8:
# importing ast and inspect for two constants would cost every fresh
# interpreter tens of milliseconds.
# The characters of an exception's message an answer carries.
MAX_ERROR = 8 << 10
PYCF_ALLOW_TOP_LEVEL_AWAIT = 0x2000
CO_COROUTINE = 0x0080
PYCF_ONLY_AST = 0x0400


def _help(*args: Any, **kwargs: Any) -> None:
    # `help` normally comes from `site`, which the interpreter skips (-S).
    import pydoc

    from cyrnel import _tools

    for a in args:
        _tools.load_docs(a)
    pydoc.help(*args, **kwargs)


def _failure(exc: BaseException) -> dict[str, Any]:
    # A runtime reports only success or failed: every other end (timeout,
    # memory_limit, ...) is the host's to decide (docs/protocol.md).
    name = type(exc).__name__
    msg = str(exc)
    if len(msg) > MAX_ERROR:
        # The answer is a message like any other, within the output limit;
        # the traceback on stderr has the whole text.
        msg = msg[:MAX_ERROR] + "…"
    return {"status": "failed", "error": f"{name}: {msg}" if msg else name}


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """The traceback without the runtime's frames: it starts in the program
    (not in the runtime or asyncio that ran it), and frames of the cyrnel
    package (a tool stub, the RPC client) are cut wherever they appear."""
    start = tb
    while start is not None and start.tb_frame.f_code.co_filename != FILENAME:
        start = start.tb_next
    if start is not None:
        tb = start
    frames = []
    while tb is not None:
        if not tb.tb_frame.f_code.co_filename.startswith(_RUNTIME_DIR):
            frames.append(tb)
        tb = tb.tb_next
    head = None
    for t in reversed(frames):
        head = type(t)(head, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return head


def _hide_runtime(exc: BaseException) -> None:
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        e.__traceback__ = _user_frames(e.__traceback__)
        e = e.__cause__ or (None if e.__suppress_context__ else e.__context__)


def _print_traceback(exc: BaseException) -> None:
    _hide_runtime(exc)
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)


class _State:
    """What the worker keeps between executions. One-shot interpreters run a
    single program; a session's interpreter (``serve(session=True)``: the
    argument ``--session`` of a started one, the fork request of a forked
    one) keeps its globals, and the host may interrupt a program without
    ending it."""

    def __init__(self) -> None:
        self.scope: dict[str, Any] | None = None  # kept across executions in a session
        self.executing = False
        self.eid: Any = None  # the execution being run
        self.cancelled = False  # the host asked to stop the running program
        # The last execution the host asked to stop: its cancel can arrive
        # before the main thread has started it.
        self.cancel_eid: Any = None


_state = _State()


def _compile(code: str) -> tuple[CodeType, CodeType | None]:
    """The program, and its final expression compiled apart when there is
    one: its value is displayed as a notebook shows a cell's result. A
    program using top-level await is compiled whole (no result)."""
    flags = PYCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(code, FILENAME, "exec", flags=flags | PYCF_ONLY_AST, dont_inherit=True)
    body = tree.body
    if body and type(body[-1]).__name__ == "Expr":
        import _ast  # built in: free

        last = compile(_ast.Expression(body[-1].value), FILENAME, "eval", flags=flags, dont_inherit=True)
        tree.body = body[:-1]
        main = compile(tree, FILENAME, "exec", flags=flags, dont_inherit=True)
        if not (main.co_flags | last.co_flags) & CO_COROUTINE:
            return main, last
        tree.body = body
    return compile(tree, FILENAME, "exec", flags=flags, dont_inherit=True), None


def _show_figures(result: Any) -> None:
    """Figures left open in pyplot are shown at the end, as in a notebook
    (the final expression's figure only once)."""
    if "matplotlib.pyplot" not in sys.modules:
        return
    from cyrnel import _display

    for fig in _display.open_figures():
        if fig is not result:
            _rpc.send_display("display", fig)


def run(code: str) -> dict[str, Any]:
    linecache.cache[FILENAME] = (len(code), None, code.splitlines(True), FILENAME)
    scope = _state.scope
    if scope is None:
        scope = {"__name__": "__main__", "__builtins__": builtins, "cyrnel": cyrnel}
    result: Any = None
    try:
        try:
            compiled, last = _compile(code)
        except (SyntaxError, ValueError) as e:
            traceback.print_exception(type(e), e, None, file=sys.stderr)
            return _failure(e)
        if compiled.co_flags & CO_COROUTINE:
            import asyncio  # free when preloaded (the default)

            asyncio.run(eval(compiled, scope))
        else:
            exec(compiled, scope)
            if last is not None:
                result = eval(last, scope)
                if result is not None:
                    _rpc.send_display("result", result)
        _show_figures(result)
    except SystemExit as e:
        if e.code is None or e.code == 0:
            return {"status": "success"}
        _print_traceback(e)
        return {"status": "failed", "error": f"SystemExit: {e.code}"}
    except KeyboardInterrupt as e:
        if _state.cancelled:
            return {"status": "stopped"}
        _print_traceback(e)
        return _failure(e)
    except BaseException as e:  # noqa: BLE001 - every user failure is reported
        _print_traceback(e)
        return _failure(e)
    finally:
        _state.executing = False
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream must not mask the result
                pass
    return {"status": "success"}


class _Notifier(io.RawIOBase):
    """A session's stdout or stderr: sent to the host as notifications, in
    order with the answers, since the raw pipes stay open between
    executions."""

    def __init__(self, conn: _rpc.Connection, method: str) -> None:
        super().__init__()
        self._conn = conn
        self._method = method

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        # A part at a time (the buffered writer above sends the rest): one
        # message stays within the execution's limit on messages.
        data = bytes(b[: _rpc.PART])
        if data:
            self._conn.notify(self._method, {"data": binascii.b2a_base64(data, newline=False).decode("ascii")})
        return len(data)


def _serve_session(conn: _rpc.Connection) -> None:
    """Keep globals between executions; output goes through the protocol; a
    cancel interrupts the program (KeyboardInterrupt, as in a notebook)."""
    import signal
    import threading

    # Imported now: a session outlives the environment that started it,
    # whose teardown removes the runtime's directory.
    from cyrnel import _display  # noqa: F401

    _state.scope = {"__name__": "__main__", "__builtins__": builtins, "cyrnel": cyrnel}
    main = threading.get_ident()  # called on the main thread

    def on_cancel(eid: Any) -> None:
        _state.cancel_eid = eid
        if _state.executing and _state.eid == eid:
            _state.cancelled = True
            signal.pthread_kill(main, signal.SIGINT)

    def on_sigint(signum: int, frame: Any) -> None:
        # A signal that lands after the program ended interrupts nothing.
        if _state.executing:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_sigint)
    conn.on_cancel = on_cancel
    for name in ("stdout", "stderr"):
        stream = io.TextIOWrapper(
            io.BufferedWriter(_Notifier(conn, name)), encoding="utf-8", errors="backslashreplace", line_buffering=True
        )
        setattr(sys, name, stream)


def _release_output() -> None:
    """Point fds 1 and 2 at /dev/null so the host's output pipes reach
    end-of-file before the answer arrives: the host then has every byte
    without waiting for this interpreter to die."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)


# The argument that starts a session's interpreter: a preload entry is a
# module name, which never starts with "-".
SESSION_ARG = "--session"


def main(args: list[str] | tuple[str, ...] = ()) -> None:
    """Run the worker. ``args`` name modules to import while warm, after
    ``--session`` for a session's interpreter."""
    session = bool(args) and args[0] == SESSION_ARG
    warm(args[1:] if session else args)
    serve(session)


def warm(preload: list[str] | tuple[str, ...] = ()) -> None:
    """Everything an execution should not pay: the preload imports."""
    sys.argv = [""]
    for i, name in enumerate(preload):
        try:
            importlib.import_module(name)
        except BaseException as e:  # noqa: BLE001 - any failure refuses the config
            # The host reads this line to name the module in its answer.
            why = f"{type(e).__name__}: {e}".replace("\n", " ")
            sys.stderr.write(f"cyrnel: preload[{i}] {name}: {why}\n")
            sys.exit(1)
    if any(name == "matplotlib" or name.startswith("matplotlib.") for name in preload):
        _warm_plotting()
    if any(name == "pandas" or name.startswith("pandas.") for name in preload):
        _warm_frames()
    # The compiler builds its AST types on an interpreter's first program:
    # here, once, rather than in every interpreter forked from this one
    # (where no preload imported ast, ~0.7 ms and ~120 pages each).
    _compile("pass")
    # Line buffering: output reaches the host as it is printed, not at exit.
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)
    builtins.help = _help


def _warm_plotting() -> None:
    """A preloaded matplotlib is made ready to plot: pyplot, the font list
    (built into the config and cache directories under HOME, /tmp), the Agg
    backend, the default font and the PNG writer are loaded by drawing one
    figure, so a program's first plot costs what any plot costs."""
    plt = importlib.import_module("matplotlib.pyplot")
    fig = plt.figure(figsize=(1, 1))
    plt.plot([0, 1], [0, 1], label="x")
    plt.title("x")
    plt.legend()
    fig.savefig(io.BytesIO(), format="png")
    plt.close("all")


def _warm_frames() -> None:
    """A preloaded pandas is made ready for frames: what a frame's first
    construction, arithmetic, selection, grouping, description, merge and
    printing import or build once (caches, a formatter) is built here, in
    the template, and shared by every interpreter forked from it instead of
    paid by each: in a fresh fork the first grouping, description or print
    costs about half as much, a column's sum a fifth less."""
    pd = importlib.import_module("pandas")
    df = pd.DataFrame({"a": [1, 2, 3], "b": [0.5, 1.5, 2.5], "c": ["x", "y", "x"]})
    df["a"].sum()
    df["a"] + df["b"]
    df[df["a"] > 1]
    df.groupby("c").sum()
    df.describe()
    df.merge(df, on="c")
    df.to_string()
    repr(df["a"])


def _prefault() -> None:
    """Walk an execution's path once before announcing readiness. A forked
    interpreter shares the template's pages until it writes them (reference
    counts are writes): the copy-on-write faults of compiling and running a
    program are taken here, not while a request waits."""
    compiled, _ = _compile("pass")
    exec(compiled, {"__name__": "__main__", "__builtins__": builtins})
    linecache.cache.pop(FILENAME, None)


def serve(session: bool = False) -> None:
    """Announce readiness on the protocol pipes and run one program, or a
    session's programs one after the other."""
    conn = _rpc.Connection()
    _rpc.conn = conn
    # The workspace: a directory of its own in the private work directory
    # (which also holds the runtime), the working directory of every
    # execution, where input files go and output files are collected.
    os.makedirs("workspace", exist_ok=True)
    os.chdir("workspace")
    if session:
        _serve_session(conn)
        conn.start()  # a cancel must reach a running program
    else:
        _prefault()
    conn.notify("ready", {"pid": os.getpid()})
    while True:
        msg = conn.next_request()
        if msg is None:
            return
        method, req_id = msg.get("method"), msg.get("id")
        if method == "execute":
            params = msg.get("params") or {}
            _state.cancelled = False
            _state.eid = params.get("eid")
            _state.executing = True
            if session and _state.cancel_eid == _state.eid:
                _state.executing = False  # stopped before it started
                result: dict[str, Any] = {"status": "stopped"}
            else:
                try:
                    _files.place(params.get("files"))
                except KeyboardInterrupt:
                    _state.executing = False  # cancelled while its files were placed
                    result = {"status": "stopped"}
                except (OSError, ValueError, _files.FileError) as e:
                    _state.executing = False
                    sys.stderr.write(f"cyrnel: input files: {e}\n")
                    result = _failure(e)
                else:
                    result = run(params.get("code", ""))
            if not session:
                _files.collect(conn.notify)
                _release_output()
            conn.reply(req_id, result)
        elif session and req_id is not None and method in _files.OPS:
            answer, error = _files.serve(str(method), msg.get("params") or {})
            conn.reply(req_id, answer, error)
        elif req_id is not None:
            conn.reply(req_id, error={"code": -32601, "message": f"method not found: {method}"})


if __name__ == "__main__":
    main(sys.argv[1:])
