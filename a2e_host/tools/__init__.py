"""Tools: the callables behind ``tool`` nodes, their packs and registry (PROTOCOL.md §5, §7).

See :mod:`a2e_host.tools.model` (:class:`Tool`, :func:`tool`),
:mod:`a2e_host.tools.registry` (:class:`ToolPack`, :class:`ToolRegistry`, :func:`load_tools`)
and :mod:`a2e_host.tools.confine` (:class:`RootDir`: open files below a root by handle, for
any tool that touches files). A running tool reaches its node's context (idempotency key,
deadline, progress reports) through :func:`context` and :func:`report`
(:mod:`a2e_host.tools.context`); the ``tools`` capability's messages are in
:mod:`a2e_host.tools.messages`.
"""

from .confine import Opened, PathRefused, RootDir
from .context import MAX_REPORT_BYTES, MAX_REPORTS, REPORT_KINDS, NodeContext, context, report
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
    "MAX_REPORT_BYTES",
    "MAX_REPORTS",
    "NodeContext",
    "Opened",
    "REPORT_KINDS",
    "PathRefused",
    "RootDir",
    "SIDE_EFFECTS",
    "SideEffects",
    "TOOLS_GROUP",
    "Tool",
    "ToolPack",
    "ToolPackError",
    "ToolRegistry",
    "context",
    "discover_packs",
    "load_pack",
    "load_tools",
    "pack_entry_points",
    "report",
    "tool",
]
