"""The cyrnel runtime inside a sandboxed interpreter.

``cyrnel.output({...})`` merges a structured result into the process output;
``cyrnel.services.<service>.<tool>(**params)`` calls a tool through the host;
``cyrnel.search_tools("what to do")`` finds tools, ranked by relevance;
``cyrnel.display(obj)`` shows an object (a figure, a table) as a notebook would.
"""

from cyrnel._tools import ToolError, search_tools, services
from cyrnel._rpc import display, output

__all__ = ["display", "output", "search_tools", "services", "ToolError"]
