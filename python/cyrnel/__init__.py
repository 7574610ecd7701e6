"""The cyrnel runtime inside a sandboxed interpreter.

``cyrnel.output({...})`` merges a structured result into the process output;
``cyrnel.services.<service>.<tool>(**params)`` calls a tool through the host;
``cyrnel.search_tools("what to do")`` finds tools, ranked by relevance.
"""

from cyrnel._tools import ToolError, search_tools, services
from cyrnel._rpc import output

__all__ = ["output", "search_tools", "services", "ToolError"]
