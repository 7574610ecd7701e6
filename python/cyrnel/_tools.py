"""Tools as Python functions.

``cyrnel.services.<service>.<tool>(**params)`` calls a tool and returns its
decoded result; ``<tool>.aio(**params)`` is the awaitable form, so calls can
run concurrently with ``asyncio.gather``; the TypeScript-shaped
``cyrnel.services["s"].tools["t"].invoke({...})`` works too. Stubs are built
lazily, one service at a time, from the host's tool list.
"""

import keyword

from cyrnel import _rpc


class ToolError(Exception):
    """A tool call failed: invalid parameters, a disabled tool, an adapter error."""


def _call(service_id, tool_id, params):
    try:
        return _rpc.conn.call("invokeTool", {"serviceId": service_id, "toolId": tool_id, "parameters": params})
    except _rpc.RPCError as e:
        raise ToolError(str(e)) from None


async def _acall(service_id, tool_id, params):
    try:
        return await _rpc.conn.acall("invokeTool", {"serviceId": service_id, "toolId": tool_id, "parameters": params})
    except _rpc.RPCError as e:
        raise ToolError(str(e)) from None


_JSON_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool", "array": "list", "object": "dict", "null": "None"}


def _type_name(schema):
    t = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(t, list):
        return " | ".join(_JSON_TYPES.get(x, x) for x in t)
    if isinstance(t, str):
        return _JSON_TYPES.get(t, t)
    return "Any"


def _make_tool(service_id, info):
    import inspect  # only programs that use tools pay for it

    tool_id = info["toolId"]
    schema = info.get("inputSchema") or {}
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])

    def tool(**params):
        return _call(service_id, tool_id, params)

    def invoke(params=None):
        return _call(service_id, tool_id, dict(params or {}))

    def aio(**params):
        return _acall(service_id, tool_id, params)

    lines = [info.get("description") or info.get("name") or tool_id, ""]
    parameters = []
    for name, sub in props.items():
        req = name in required
        desc = sub.get("description", "") if isinstance(sub, dict) else ""
        lines.append(f"  {name} ({_type_name(sub)}{', required' if req else ''}){': ' + desc if desc else ''}")
        if name.isidentifier() and not keyword.iskeyword(name):
            default = inspect.Parameter.empty if req else None
            parameters.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default))
    if props:
        lines.insert(2, "Parameters:")
    lines.append("")
    lines.append("Returns the tool's result; raises cyrnel.ToolError on failure.")
    lines.append(f"Awaitable form: await cyrnel.services.{service_id}.{tool_id}.aio(...)")
    tool.__name__ = tool.__qualname__ = tool_id
    tool.__doc__ = "\n".join(lines)
    tool.__signature__ = inspect.Signature(parameters)
    tool.invoke = invoke
    tool.aio = aio
    return tool


class Service:
    """The tools of one service, as attributes (``svc.tool(...)``) and as
    ``svc.tools["tool"].invoke({...})``."""

    def __init__(self, service_id, tools):
        self._id = service_id
        self.tools = {t["toolId"]: _make_tool(service_id, t) for t in tools}

    def __getattr__(self, name):
        try:
            return self.__dict__["tools"][name]
        except KeyError:
            raise AttributeError(f"service {self._id!r} has no enabled tool {name!r}") from None

    def __dir__(self):
        return sorted(self.tools)

    def __repr__(self):
        return f"<cyrnel service {self._id!r}: {len(self.tools)} tools>"


class Services:
    """Enabled services, by attribute or by key."""

    def __init__(self):
        self._cache = {}

    def _get(self, service_id):
        svc = self._cache.get(service_id)
        if svc is None:
            tools = _rpc.conn.call("listTools", {"serviceId": service_id}) or []
            if not tools:
                raise AttributeError(f"no enabled service {service_id!r} (or it has no enabled tools)")
            svc = self._cache[service_id] = Service(service_id, tools)
        return svc

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._get(name)

    def __getitem__(self, name):
        try:
            return self._get(name)
        except AttributeError as e:
            raise KeyError(str(e)) from None

    def __dir__(self):
        tools = _rpc.conn.call("listTools", {}) or []
        return sorted({t["serviceId"] for t in tools})

    def __repr__(self):
        return "<cyrnel services: " + ", ".join(self.__dir__()) + ">"


services = Services()


def search_tools(query, limit=10):
    """Enabled tools ranked by relevance to ``query`` (words: what you want
    to do), best first: a list of ``{"serviceId", "toolId", "name",
    "description", "score"}``. Call one with
    ``cyrnel.services[m["serviceId"]].tools[m["toolId"]].invoke({...})``."""
    return _rpc.conn.call("searchTools", {"query": str(query), "limit": int(limit)}) or []
