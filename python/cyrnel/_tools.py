"""Tools as Python functions.

``cyrnel.services.<service>.<tool>(**params)`` calls a tool and returns its
decoded result; ``<tool>.aio(**params)`` is the awaitable form, so calls can
run concurrently with ``asyncio.gather``; the TypeScript-shaped
``cyrnel.services["s"].tools["t"].invoke({...})`` works too. Stubs are built
lazily, one service at a time, from the host's tool list, which carries each
tool's typed signature; ``help(tool)`` fetches its documentation, rendered by
the host as for ``GET /tools/{service}/{tool}/docs``.
"""

from __future__ import annotations

import keyword

from cyrnel import _rpc

TYPE_CHECKING = False  # typing costs every interpreter an import; mypy reads it as True
if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from typing import Any


class ToolError(Exception):
    """A tool call failed.

    ``code`` says how: ``"invalid_parameters"`` (``details`` lists the
    failing fields as ``{"path", "message"}``), ``"not_found"`` (no such
    service or tool), ``"unavailable"`` (disabled), ``"transport_error"``
    (no answer from the upstream: refused, DNS, TLS, timeout),
    ``"upstream_error"`` (an answer that could not be used; ``status`` is
    its HTTP status), ``"tool_error"`` (any other failure of the tool),
    ``"disconnected"`` (the host can no longer answer). A non-2xx answer of
    an upstream API is a result, not a ToolError: read ``result["status"]``.
    """

    def __init__(
        self,
        message: str,
        code: str = "tool_error",
        status: int | None = None,
        details: Any = None,
        service_id: str | None = None,
        tool_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.details = details
        self.service_id = service_id
        self.tool_id = tool_id

    def __repr__(self) -> str:
        return f"ToolError({str(self)!r}, code={self.code!r}, status={self.status!r})"


def _tool_error(e: _rpc.RPCError, service_id: str, tool_id: str) -> ToolError:
    data = e.data if isinstance(e.data, dict) else {}
    code = data.get("code")
    if not isinstance(code, str):
        code = e.code if isinstance(e.code, str) else "tool_error"
    status = data.get("status")
    return ToolError(
        str(e),
        code=code,
        status=status if isinstance(status, int) else None,
        details=data.get("details"),
        service_id=service_id,
        tool_id=tool_id,
    )


def _conn() -> _rpc.Connection:
    if _rpc.conn is None:
        raise RuntimeError("cyrnel tools are only available inside a cyrnel process")
    return _rpc.conn


def _call(service_id: str, tool_id: str, params: dict[str, Any]) -> Any:
    try:
        return _conn().call("invokeTool", {"serviceId": service_id, "toolId": tool_id, "parameters": params})
    except _rpc.RPCError as e:
        raise _tool_error(e, service_id, tool_id) from None


async def _acall(service_id: str, tool_id: str, params: dict[str, Any]) -> Any:
    try:
        return await _conn().acall("invokeTool", {"serviceId": service_id, "toolId": tool_id, "parameters": params})
    except _rpc.RPCError as e:
        raise _tool_error(e, service_id, tool_id) from None


_TYPES: dict[str, Any] = {"str": str, "int": int, "float": float, "bool": bool, "list": list, "dict": dict, "None": None}


def _annotation(name: str) -> Any:
    """The Python type the host's signature names ("int | None", "Any")."""
    parts = []
    for part in name.split(" | "):
        if part not in _TYPES:
            from typing import Any as AnyType  # only for schemas without a type

            return AnyType
        parts.append(type(None) if _TYPES[part] is None else _TYPES[part])
    t = parts[0]
    try:
        for p in parts[1:]:
            t = t | p
    except TypeError:  # interpreters before 3.10 have no X | Y
        from typing import Any as AnyType

        return AnyType
    return t


def _make_tool(service_id: str, info: dict[str, Any]) -> Callable[..., Any]:
    """One tool as a function: ``tool(**params)``, ``tool.invoke({...})``,
    ``await tool.aio(**params)``; ``help(tool)`` shows its documentation."""
    import inspect  # only programs that use tools pay for it

    tool_id: str = info["toolId"]

    def tool(**params: Any) -> Any:
        return _call(service_id, tool_id, params)

    def invoke(params: dict[str, Any] | None = None) -> Any:
        return _call(service_id, tool_id, dict(params or {}))

    def aio(**params: Any) -> Awaitable[Any]:
        return _acall(service_id, tool_id, params)

    sig = info.get("signature") or {}
    parameters = []
    for p in sig.get("parameters") or []:
        name = p.get("name", "")
        # A parameter whose name is no identifier is still accepted through
        # invoke({...}) and **{...}.
        if not name.isidentifier() or keyword.iskeyword(name):
            continue
        ann = _annotation(p.get("type", "Any"))
        if p.get("required"):
            parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=ann))
        else:
            parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ann | None))
    tool.__name__ = tool.__qualname__ = tool_id
    tool.__doc__ = info.get("description") or info.get("name") or tool_id
    setattr(tool, "_cyrnel_tool", (service_id, tool_id))
    setattr(tool, "__signature__", inspect.Signature(parameters, return_annotation=_annotation(sig.get("returns", "Any"))))
    setattr(tool, "invoke", invoke)
    setattr(tool, "aio", aio)
    return tool


def load_docs(obj: Any) -> None:
    """Replace a tool's short ``__doc__`` by its full documentation (help()
    calls this: docs with result schemas are too large to fetch for every
    tool of a service up front)."""
    ids = getattr(obj, "_cyrnel_tool", None)
    if not isinstance(ids, tuple) or getattr(obj, "_cyrnel_docs", False):
        return
    try:
        obj.__doc__ = _conn().call("toolDocs", {"serviceId": ids[0], "toolId": ids[1]})
    except _rpc.RPCError:
        return  # the short description stays
    setattr(obj, "_cyrnel_docs", True)


class Service:
    """The tools of one service, as attributes (``svc.tool(...)``) and as
    ``svc.tools["tool"].invoke({...})``."""

    def __init__(self, service_id: str, tools: list[dict[str, Any]]) -> None:
        self._id = service_id
        self.tools = {t["toolId"]: _make_tool(service_id, t) for t in tools}

    def __getattr__(self, name: str) -> Callable[..., Any]:
        try:
            return self.__dict__["tools"][name]  # type: ignore[no-any-return]
        except KeyError:
            raise AttributeError(f"service {self._id!r} has no enabled tool {name!r}") from None

    def __dir__(self) -> list[str]:
        return sorted(self.tools)

    def __repr__(self) -> str:
        return f"<cyrnel service {self._id!r}: {len(self.tools)} tools>"


class Services:
    """Enabled services, by attribute or by key."""

    def __init__(self) -> None:
        self._cache: dict[str, Service] = {}

    def _get(self, service_id: str) -> Service:
        svc = self._cache.get(service_id)
        if svc is None:
            tools = _conn().call("listTools", {"serviceId": service_id}) or []
            if not tools:
                raise AttributeError(f"no enabled service {service_id!r} (or it has no enabled tools)")
            svc = self._cache[service_id] = Service(service_id, tools)
        return svc

    def __getattr__(self, name: str) -> Service:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._get(name)

    def __getitem__(self, name: str) -> Service:
        try:
            return self._get(name)
        except AttributeError as e:
            raise KeyError(str(e)) from None

    def __dir__(self) -> list[str]:
        tools = _conn().call("listTools", {}) or []
        return sorted({t["serviceId"] for t in tools})

    def __repr__(self) -> str:
        return "<cyrnel services: " + ", ".join(self.__dir__()) + ">"


services = Services()


def search_tools(query: str, limit: int = 10) -> list[dict[str, Any]]:
    """Enabled tools ranked by relevance to ``query`` (words: what you want
    to do), best first: a list of ``{"serviceId", "toolId", "name",
    "description", "score"}``. Call one with
    ``cyrnel.services[m["serviceId"]].tools[m["toolId"]].invoke({...})``."""
    found: list[dict[str, Any]] = _conn().call("searchTools", {"query": str(query), "limit": int(limit)}) or []
    return found
