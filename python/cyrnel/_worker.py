"""The interpreter's main loop: warm up, announce readiness, run one program.

The host starts the interpreter with fds 3 and 4 as the JSON-RPC pipes and
fds 1 and 2 as raw pipes for stdout and stderr. Everything costly (asyncio,
the ``preload`` modules) is imported here, before ``ready``, so an execution
pays none of it.
"""

import builtins
import importlib
import linecache
import os
import sys
import traceback

import cyrnel
from cyrnel import _rpc

FILENAME = "<process>"

# ast.PyCF_ALLOW_TOP_LEVEL_AWAIT and inspect.CO_COROUTINE, stable since 3.8:
# importing ast and inspect for two constants would cost every fresh
# interpreter tens of milliseconds.
PYCF_ALLOW_TOP_LEVEL_AWAIT = 0x2000
CO_COROUTINE = 0x0080


def _help(*args, **kwargs):
    # `help` normally comes from `site`, which the interpreter skips (-S).
    import pydoc

    return pydoc.help(*args, **kwargs)


def _failure(exc, reason="exception"):
    name = type(exc).__name__
    msg = str(exc)
    return {"status": "failed", "error": f"{name}: {msg}" if msg else name, "reason": reason}


def _print_traceback(exc):
    tb = exc.__traceback__
    # Drop this module's own frames so the traceback starts in user code.
    while tb is not None and tb.tb_frame.f_code.co_filename != FILENAME:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb, file=sys.stderr)


def run(code):
    linecache.cache[FILENAME] = (len(code), None, code.splitlines(True), FILENAME)
    scope = {"__name__": "__main__", "__builtins__": builtins, "cyrnel": cyrnel}
    try:
        try:
            compiled = compile(code, FILENAME, "exec", flags=PYCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
        except (SyntaxError, ValueError) as e:
            traceback.print_exception(type(e), e, None, file=sys.stderr)
            return _failure(e)
        if compiled.co_flags & CO_COROUTINE:
            import asyncio  # free when preloaded (the default)

            asyncio.run(eval(compiled, scope))
        else:
            exec(compiled, scope)
    except SystemExit as e:
        if e.code is None or e.code == 0:
            return {"status": "success"}
        _print_traceback(e)
        return {"status": "failed", "error": f"SystemExit: {e.code}", "reason": "exception"}
    except MemoryError as e:
        _print_traceback(e)
        return _failure(e, "memory_limit")
    except BaseException as e:  # noqa: BLE001 - every user failure is reported
        _print_traceback(e)
        return _failure(e)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream must not mask the result
                pass
    return {"status": "success"}


def _release_output():
    """Point fds 1 and 2 at /dev/null so the host's output pipes reach
    end-of-file before the answer arrives: the host then has every byte
    without waiting for this interpreter to die."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    os.close(null)


def main(preload=()):
    """Run the worker. ``preload`` names modules to import while warm."""
    warm(preload)
    serve()


def warm(preload=()):
    """Everything an execution should not pay: the preload imports."""
    sys.argv = [""]
    for name in preload:
        importlib.import_module(name)
    # Line buffering: output reaches the host as it is printed, not at exit.
    sys.stdout.reconfigure(line_buffering=True)
    builtins.help = _help


def serve():
    """Announce readiness on the protocol pipes and run one program."""
    conn = _rpc.Connection()
    _rpc.conn = conn
    conn.start()
    conn.notify("ready", {"pid": os.getpid()})
    while True:
        msg = conn.requests.get()
        if msg is None:
            return
        method, req_id = msg.get("method"), msg.get("id")
        if method == "execute":
            params = msg.get("params") or {}
            result = run(params.get("code", ""))
            _release_output()
            conn.reply(req_id, result)
        elif method == "shutdown":
            if req_id is not None:
                conn.reply(req_id, None)
            return
        elif req_id is not None:
            conn.reply(req_id, error={"code": -32601, "message": f"method not found: {method}"})


if __name__ == "__main__":
    main(sys.argv[1:])
