"""Tools: the callables behind ``tool`` nodes, their packs and registry (PROTOCOL.md §5, §7).

See :mod:`a2e_host.tools.model` (:class:`Tool`, :func:`tool`) and
:mod:`a2e_host.tools.registry` (:class:`ToolPack`, :class:`ToolRegistry`, :func:`load_tools`).
"""

from .model import SIDE_EFFECTS, SideEffects, Tool, tool
from .registry import TOOLS_GROUP, ToolPack, ToolRegistry, discover_packs, load_tools

__all__ = [
    "SIDE_EFFECTS",
    "SideEffects",
    "TOOLS_GROUP",
    "Tool",
    "ToolPack",
    "ToolRegistry",
    "discover_packs",
    "load_tools",
    "tool",
]
