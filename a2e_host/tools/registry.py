"""Tool packs and the registry of enabled tools.

Layer: core (imports entry points; runs no tools). A tool pack is published under the
entry-point group ``a2e_host.tools`` as a :class:`ToolPack` object; the host enables the
packs named in ``HostConfig.tools`` (``--tools conformance``) and nothing else.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points

from ..config import HostConfig
from .model import Tool

__all__ = ["ToolPack", "ToolRegistry", "load_tools", "discover_packs", "TOOLS_GROUP"]

TOOLS_GROUP = "a2e_host.tools"
"""The entry-point group tool packs register in."""


@dataclass(frozen=True, slots=True)
class ToolPack:
    """A named set of tools, built for one configuration.

    Attributes:
        name: the name ``--tools`` enables it by (the entry point's name should match).
        description: one line for listings.
        factory: ``factory(config) -> list[Tool]``; e.g. ``fs`` confines its tools to
            ``config.root_path``.
    """

    name: str
    description: str
    factory: Callable[[HostConfig], list[Tool]]


class ToolRegistry:
    """The tools one host serves, by name."""

    __slots__ = ("_tools",)

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools or ():
            self.register(t)

    def register(self, tool: Tool) -> None:
        """Add ``tool``.

        Raises:
            ValueError: a tool of that name is already registered.
        """
        if tool.name in self._tools:
            raise ValueError(
                f"tool {tool.name!r} is registered twice; enable only one pack that defines it"
            )
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or None."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """Every tool name, sorted."""
        return sorted(self._tools)

    def suggest(self, name: str) -> list[str]:
        """Up to three registered names close to ``name`` (for "did you mean …?")."""
        return difflib.get_close_matches(name, list(self._tools), n=3, cutoff=0.6)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools[n] for n in sorted(self._tools))

    def __len__(self) -> int:
        return len(self._tools)


def discover_packs(group: str = TOOLS_GROUP) -> dict[str, ToolPack]:
    """The installed packs of entry-point ``group``, by entry-point name (not loaded yet
    beyond importing their module).

    Raises:
        TypeError: an entry point does not name a :class:`ToolPack`.
    """
    packs: dict[str, ToolPack] = {}
    for ep in entry_points(group=group):
        obj = ep.load()
        if not isinstance(obj, ToolPack):
            raise TypeError(
                f"entry point {ep.name!r} of group {group!r} must name a ToolPack, "
                f"got {type(obj).__name__}"
            )
        packs[ep.name] = obj
    return packs


def load_tools(config: HostConfig, *, packs: dict[str, ToolPack] | None = None) -> ToolRegistry:
    """Build the registry of the packs named in ``config.tools``.

    Args:
        config: the host configuration (``tools``, and what the factories read).
        packs: the packs to choose from; default: the installed ``a2e_host.tools`` packs.

    Raises:
        ValueError: a pack name that is not installed (naming the known ones), or two
            packs defining the same tool.
    """
    if not config.tools:
        return ToolRegistry()
    available = discover_packs() if packs is None else packs
    registry = ToolRegistry()
    for pack_name in config.tools:
        pack = available.get(pack_name)
        if pack is None:
            known = ", ".join(sorted(available)) or "none installed"
            raise ValueError(f"unknown tool pack {pack_name!r}; known packs: {known}")
        for t in pack.factory(config):
            registry.register(t)
    return registry
