"""The cyrnel runtime inside a sandboxed interpreter.

``cyrnel.output({...})`` merges a structured result into the process output;
``cyrnel.services.<service>.<tool>(**params)`` calls a tool through the host.
"""

from cyrnel._tools import ToolError, services
from cyrnel._rpc import output

__all__ = ["output", "services", "ToolError"]
