"""What the host takes from an MCP server's tool listing (issue 20, PROTOCOL.md §12): names
MCP does not allow are left out, at most ``MAX_TOOLS`` tools are taken from one server,
a giant description is cut. Pure: the listing is given to the link as ``mcp.types.Tool``
objects (in a running event loop), no process is started."""

from __future__ import annotations

import anyio
import pytest
import structlog
from a2e_mcp.link import MAX_TOOLS, ServerLink
from a2e_mcp.settings import McpSettings, ServerSettings
from a2e_mcp.tools import MAX_DESCRIPTION_CHARS
from mcp.types import Tool as McpTool

from a2e_host.tools import ToolRegistry


def _link(registry: ToolRegistry) -> ServerLink:
    server = ServerSettings(name="srv", command=("unused",))
    return ServerLink(server, McpSettings(), registry, structlog.get_logger("test"))


def _tool(name: str, description: str = "") -> McpTool:
    return McpTool(name=name, description=description, input_schema={"type": "object"})


@pytest.mark.asyncio
async def test_tools_whose_names_mcp_does_not_allow_are_left_out() -> None:
    registry = ToolRegistry()
    link = _link(registry)
    names = ["ok", "a.b", "with-dash_9", "", "a/b", "ünï", "x y", "a\nb", "z" * 129,
             "y" * 128]
    link._sync_tools([_tool(n) for n in names])
    assert registry.names() == sorted(["srv.ok", "srv.a.b", "srv.with-dash_9",
                                       "srv." + "y" * 128])
    assert link.tool_names == {"srv.ok": "ok", "srv.a.b": "a.b",
                               "srv.with-dash_9": "with-dash_9", "srv." + "y" * 128: "y" * 128}


@pytest.mark.asyncio
async def test_at_most_max_tools_are_taken_from_one_server_the_first_by_name() -> None:
    registry = ToolRegistry()
    link = _link(registry)
    link._sync_tools([_tool(f"t{i:05d}") for i in range(MAX_TOOLS + 500)])
    names = registry.names()
    assert len(names) == MAX_TOOLS
    assert (names[0], names[-1]) == ("srv.t00000", f"srv.t{MAX_TOOLS - 1:05d}")


@pytest.mark.asyncio
async def test_a_giant_tool_description_is_cut() -> None:
    registry = ToolRegistry()
    _link(registry)._sync_tools([_tool("big", "d" * 1_000_000)])
    got = registry.get("srv.big")
    assert got is not None and got.description == "d" * MAX_DESCRIPTION_CHARS


@pytest.mark.asyncio
async def test_a_link_stopped_before_it_connected_answers_its_waiters_with_why() -> None:
    # an unregister racing its own registration: the registration is answered at once
    link = _link(ToolRegistry())
    link.stop()
    assert link.started.is_set()
    with anyio.fail_after(5):
        await link.supervise()  # cancelled before it began: returns, spawns nothing
    assert (link.status, link.error) == (
        "disconnected", "MCP server 'srv' was stopped (unregistered, or the host is stopping)")
