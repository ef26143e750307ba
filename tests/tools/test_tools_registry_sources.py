"""Tool sources whose tools arrive once the host runs (MCP servers, PROTOCOL.md §12): the
registry takes and drops their tools, says when it changed, and the ``tools`` capability
is served on a host whose tools all come from such a source and lists them as they come
and go."""

from __future__ import annotations

from a2e_tools import ToolsPlugin
from a2e_tools.listing import ToolCatalog

from a2e_host.config import HostConfig
from a2e_host.tools import Tool, ToolRegistry
from a2e_host.tools.messages import ToolListRequest


async def _echo(value: dict[str, object]) -> dict[str, object]:
    return value


def test_a_source_registers_and_unregisters_tools_and_the_revision_moves() -> None:
    registry = ToolRegistry()
    registry.add_source("mcp")
    start = registry.revision
    registry.register(Tool("srv.echo", _echo))
    assert registry.names() == ["srv.echo"] and registry.revision > start
    before_removal = registry.revision
    tools_seen = list(registry)  # an iteration begun before the removal
    assert registry.unregister("srv.echo") is not None
    assert registry.names() == [] and registry.revision > before_removal
    assert [t.name for t in tools_seen] == ["srv.echo"]
    assert registry.unregister("srv.echo") is None  # gone already: nothing changes
    assert registry.sources == frozenset({"mcp"})


def test_tools_is_served_with_only_a_source_and_lists_its_tools_as_they_come_and_go() -> None:
    registry = ToolRegistry()
    assert ToolsPlugin(HostConfig(), tools=registry).serves() is False
    registry.add_source("mcp")
    plugin = ToolsPlugin(HostConfig(), tools=registry)
    assert plugin.serves() is True
    catalog: ToolCatalog = plugin.catalog
    assert [d.name for d in catalog.select(ToolListRequest())] == []
    registry.register(Tool("srv.echo", _echo, description="echo"))
    assert [d.name for d in catalog.select(ToolListRequest())] == ["srv.echo"]
    registry.unregister("srv.echo")
    assert [d.name for d in catalog.select(ToolListRequest())] == []
