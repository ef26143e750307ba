"""Tools: the callables behind ``tool`` nodes, their packs and registry (PROTOCOL.md §5, §7).

See :mod:`a2e_host.tools.model` (:class:`Tool`, :func:`tool`),
:mod:`a2e_host.tools.registry` (:class:`ToolPack`, :class:`ToolRegistry`, :func:`load_tools`)
and :mod:`a2e_host.tools.confine` (:class:`RootDir`: open files below a root by handle, for
any tool that touches files).
"""

from .confine import Opened, PathRefused, RootDir
from .model import SIDE_EFFECTS, SideEffects, Tool, tool
from .registry import (
    TOOLS_GROUP,
    ToolPack,
    ToolPackError,
    ToolRegistry,
    discover_packs,
    load_pack,
    load_tools,
    pack_entry_points,
)

__all__ = [
    "Opened",
    "PathRefused",
    "RootDir",
    "SIDE_EFFECTS",
    "SideEffects",
    "TOOLS_GROUP",
    "Tool",
    "ToolPack",
    "ToolPackError",
    "ToolRegistry",
    "discover_packs",
    "load_pack",
    "load_tools",
    "pack_entry_points",
    "tool",
]
