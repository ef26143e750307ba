"""An MCP server reached over streamable HTTP (``url = "http://…/mcp"``) is a tool source
like a stdio one (issue 20, PROTOCOL.md §12): its tools are registered as ``NAME.tool``,
called with progress, and listed in ``mcp/server/list`` as ``streamable-http``. The server
is :mod:`tests.support.mcp_server` in its own process; the host is in-process."""

from __future__ import annotations

import socket
import subprocess
import sys

import anyio
import httpx2
import pytest

from a2e_host.chains.messages import ChainEvent, ChainNode, ChainRequest, ChainResponse
from a2e_host.config import HostConfig
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import open_memory_client
from tests.support import REPO
from tests.support.memory import handshaken

WAIT = 30.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def _wait_listening(url: str) -> None:
    async with httpx2.AsyncClient() as web:
        while True:
            try:
                await web.get(url)
                return
            except httpx2.TransportError:
                await anyio.sleep(0.1)


@pytest.mark.asyncio
async def test_a_streamable_http_server_is_a_tool_source() -> None:
    from a2e_mcp.messages import ServerListRequest, ServerListResponse

    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    process = await anyio.open_process(
        [sys.executable, str(REPO / "tests" / "support" / "mcp_server.py"), "--http",
         str(port)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        with anyio.fail_after(WAIT):
            await _wait_listening(url)
        host = Host(HostConfig(mcp={"servers": {"web": {
            "url": url, "tool_allow_list": ["progress", "echo"]}}}))
        with anyio.fail_after(WAIT):
            async with host.running(), open_memory_client(host) as client:
                await handshaken(client, ("chains", "mcp"))
                client.send(ServerListRequest(id="l"))
                listed = await client.receive()
                assert isinstance(listed, ServerListResponse)
                (server,) = listed.servers
                assert (server.name, server.transport, server.status, server.tools_count) == (
                    "web", "streamable-http", "ready", 2)
                client.send(ChainRequest(id="c", nodes=[
                    ChainNode(node_id="p", kind="tool", name="web.progress",
                              input={"steps": 2})], entry_node="p"))
                reports = []
                while not isinstance(message := await client.receive(), ChainResponse):
                    assert isinstance(message, ChainEvent)
                    if message.kind == "progress":
                        reports.append(message.data.get("message"))
                assert message.success is True and message.final_output == {"steps": 2}
                assert reports == ["step 1", "step 2"]
            await host.aclose()
    finally:
        process.terminate()
        with anyio.fail_after(WAIT):
            await process.wait()
