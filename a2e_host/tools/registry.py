"""Tool packs and the registry of enabled tools.

Layer: core (imports entry points; runs no tools). A tool pack is published under the
entry-point group ``a2e_host.tools`` as a :class:`ToolPack` object; the host enables the
packs named in ``HostConfig.tools`` (``--tools conformance``) and nothing else.

Packs are loaded by name: only the entry points of enabled packs are imported, so an
installed pack that is broken (a typo'd module, an import error) matters only when it is
enabled, and then stops the start with a :class:`ToolPackError` naming it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

import structlog

from ..config import HostConfig
from ..tool_patterns import tool_matches
from .model import Tool

__all__ = [
    "TOOLS_GROUP",
    "ToolPack",
    "ToolPackError",
    "ToolRegistry",
    "discover_packs",
    "load_pack",
    "load_tools",
    "pack_entry_points",
    "tools_of_packs_not_enabled",
]

TOOLS_GROUP = "a2e_host.tools"
"""The entry-point group tool packs register in."""

_log = structlog.get_logger("a2e_host.tools")


@dataclass(frozen=True, slots=True)
class ToolPack:
    """A named set of tools, built for one configuration.

    Attributes:
        name: the pack's own name; give it the entry point's name, which is the one
            ``--tools`` enables it by (a difference is logged as a warning at load).
        description: one line for listings.
        factory: ``factory(config) -> list[Tool]``; e.g. ``fs`` confines its tools to
            ``config.root_path``.
    """

    name: str
    description: str
    factory: Callable[[HostConfig], list[Tool]]


class ToolPackError(ValueError):
    """An installed tool pack that cannot be loaded or cannot build its tools.

    A ``ValueError``, so a host whose configuration enables the pack refuses to start
    (exit 2, this one line) as for any configuration a plugin cannot use.
    """


class ToolRegistry:
    """The tools one host serves, by name.

    Most tools are registered when the host is built (its tool packs). A *source* whose
    tools are known only once the host runs (an MCP server, listed over its own
    connection) is declared up front with :meth:`add_source` and registers and
    unregisters its tools later; :attr:`revision` changes with every such change, so a
    listing derived from the registry knows to derive it again.
    """

    __slots__ = ("_tools", "_packs", "_sources", "_revision")

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self._packs: dict[str, str] = {}
        self._sources: set[str] = set()
        self._revision = 0
        for t in tools or ():
            self.register(t)

    @property
    def revision(self) -> int:
        """A number that changes whenever a tool is registered or unregistered."""
        return self._revision

    @property
    def sources(self) -> frozenset[str]:
        """The declared sources (:meth:`add_source`) that register tools while the host runs."""
        return frozenset(self._sources)

    def add_source(self, name: str) -> None:
        """Declare ``name`` (e.g. ``"mcp"``) a source that registers its tools once the
        host runs: a host whose tools all come from such sources still serves ``tools``."""
        self._sources.add(name)

    def unregister(self, name: str) -> Tool | None:
        """Remove the tool called ``name`` (a source's tool going away); the removed tool,
        None when there was none."""
        removed = self._tools.get(name)
        if removed is not None:
            # a new dict, not a change in place: validation may iterate the old one in a
            # worker thread (copy on write; sources change rarely)
            self._tools = {k: v for k, v in self._tools.items() if k != name}
            self._packs.pop(name, None)
            self._revision += 1
        return removed

    def register(self, tool: Tool, pack: str = "") -> None:
        """Add ``tool``, enabled from the tool pack ``pack`` (``""``: none).

        Raises:
            ValueError: a tool of that name is already registered.
        """
        if tool.name in self._tools:
            raise ValueError(
                f"tool {tool.name!r} is registered twice; enable only one pack that defines it"
            )
        if self._sources:  # copy on write once tools come and go (see unregister)
            self._tools = {**self._tools, tool.name: tool}
        else:
            self._tools[tool.name] = tool
        self._revision += 1
        if pack:
            self._packs[tool.name] = pack

    def pack_of(self, name: str) -> str:
        """The tool pack (entry-point name) tool ``name`` was enabled from; ``""`` when
        it was registered directly or is unknown."""
        return self._packs.get(name, "")

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


def pack_entry_points(group: str = TOOLS_GROUP) -> dict[str, EntryPoint]:
    """The installed packs of entry-point ``group``, by entry-point name; none is imported."""
    return {ep.name: ep for ep in entry_points(group=group)}


def reason_line(exc: BaseException) -> str:
    """``"TypeName: first line of its message"``: ``exc`` in one line, for listings and
    start-up refusals."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def load_pack(ep: EntryPoint) -> ToolPack:
    """Import the :class:`ToolPack` entry point ``ep`` names.

    Raises:
        ToolPackError: the import failed (any exception, e.g. a typo'd module), or the
            object is not a ToolPack; the one-line message names the pack and the reason.
    """
    try:
        obj = ep.load()
    except Exception as exc:  # noqa: BLE001 - any failure of a third party's import
        raise ToolPackError(
            f"tool pack {ep.name!r} ({ep.value}) cannot be loaded: {reason_line(exc)}"
        ) from exc
    if not isinstance(obj, ToolPack):
        raise ToolPackError(
            f"tool pack {ep.name!r} ({ep.value}) names a {type(obj).__name__}, not a ToolPack"
        )
    return obj


def discover_packs(group: str = TOOLS_GROUP) -> dict[str, ToolPack]:
    """Every installed pack of entry-point ``group``, imported, by entry-point name.

    Raises:
        ToolPackError: a pack cannot be loaded (see :func:`load_pack`).
    """
    return {name: load_pack(ep) for name, ep in pack_entry_points(group).items()}


def _build(name: str, pack: ToolPack, config: HostConfig) -> list[Tool]:
    """``pack.factory(config)``; a failure other than a refused configuration
    (``ValueError``, passed on as it is) becomes a :class:`ToolPackError` naming the pack."""
    try:
        return list(pack.factory(config))
    except ValueError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of a third party's factory
        raise ToolPackError(
            f"tool pack {name!r} failed to build its tools: {reason_line(exc)}"
        ) from exc


def load_tools(config: HostConfig, *, packs: dict[str, ToolPack] | None = None) -> ToolRegistry:
    """Build the registry of the packs named in ``config.tools``, importing only those.

    Args:
        config: the host configuration (``tools``, and what the factories read).
        packs: the packs to choose from; default: the installed ``a2e_host.tools`` packs,
            of which only the named ones are imported.

    Raises:
        ValueError: a pack name that is not installed (naming the known ones), two packs
            defining the same tool, or a factory refusing the configuration.
        ToolPackError: (a ValueError) a named pack that cannot be imported or built.
    """
    if not config.tools:
        return ToolRegistry()
    installed: Mapping[str, EntryPoint | ToolPack] = (
        pack_entry_points() if packs is None else packs
    )
    registry = ToolRegistry()
    for pack_name in config.tools:
        found = installed.get(pack_name)
        if found is None:
            known = ", ".join(sorted(installed)) or "none installed"
            raise ValueError(f"unknown tool pack {pack_name!r}; known packs: {known}")
        pack = found if isinstance(found, ToolPack) else load_pack(found)
        if pack.name != pack_name:
            _log.warning(
                "a tool pack's name differs from its entry point's; --tools uses the entry "
                "point's", entry_point=pack_name, pack_name=pack.name,
            )
        tools = _build(pack_name, pack, config)
        if config.remote_tools:  # imported only then: a2e_host.tools.remote, never Ray
            from .remote import marked_remote

            tools = marked_remote(tools, pack_name, config.remote_tools)
        for t in tools:
            registry.register(t, pack_name)
    for pattern in config.remote_tools:  # a typo would leave the tool local, silently
        if not any(tool_matches((pattern,), t.name, registry.pack_of(t.name))
                   for t in registry):
            _log.warning("a remote_tools pattern matches no enabled tool; check its "
                         "spelling (<name> or <pack>.<name>) and the tool packs enabled",
                         pattern=pattern)
    if any(t.remote for t in registry):
        from . import remote

        remote.check_available()
        remote.configure(config.ray_address)
    return registry


def tools_of_packs_not_enabled(config: HostConfig) -> dict[str, str]:
    """Tool name → the installed pack that provides it, among the packs ``config.tools``
    does not enable: for the hint "it is in the 'conformance' pack" on an unknown tool.

    Imports and builds every such pack (so call it only when a hint needs it); a pack
    that cannot be imported or built is left out. A tool in several packs maps to the
    first pack by name.
    """
    enabled = set(config.tools)
    found: dict[str, str] = {}
    for name, ep in sorted(pack_entry_points().items()):
        if name in enabled:
            continue
        try:
            tools = _build(name, load_pack(ep), config)
        except Exception:  # noqa: BLE001 - a broken pack provides nothing to hint at
            continue
        for t in tools:
            found.setdefault(t.name, name)
    return found
