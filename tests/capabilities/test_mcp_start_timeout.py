"""An MCP server that never answers ``initialize`` does not hold up the host's start
beyond ``[mcp] start_timeout`` (issue 20, PROTOCOL.md §12): the host serves, the server
shows in ``mcp/server/list`` with the reason, and its tools are absent (a chain naming one
is refused as an unknown tool) while the other tools work; the server's process is
stopped with the host. On an in-process host."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import anyio
import pytest

from a2e_host.chains.messages import ChainNode, ChainRequest, ChainResponse
from a2e_host.config import HostConfig
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import open_memory_client
from tests.support.memory import handshaken

SILENT = [shutil.which("sleep") or "sleep", "600"]
"""A program that reads nothing and answers nothing."""


def _silent_children() -> list[int]:
    """The pids of this process's children running :data:`SILENT`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and [a.decode() for a in argv] == SILENT:
            found.append(int(entry.name))
    return found

WAIT = 30.0


@pytest.mark.asyncio
async def test_a_server_that_never_answers_initialize_delays_the_start_only_by_its_timeout(
        ) -> None:
    from a2e_mcp.messages import ServerListRequest, ServerListResponse

    config = HostConfig(tools=("conformance",), mcp={
        "start_timeout": 1, "restart_initial_delay": 30,
        "servers": {"silent": {"command": SILENT}}})
    host = Host(config)
    began = time.monotonic()
    with anyio.fail_after(WAIT):
        async with host.running(), open_memory_client(host) as client:
            started = time.monotonic() - began
            assert len(_silent_children()) == 1  # spawned, not answering
            await handshaken(client, ("chains", "mcp"))
            client.send(ServerListRequest(id="l"))
            listed = await client.receive()
            assert isinstance(listed, ServerListResponse)
            (server,) = listed.servers
            assert (server.name, server.tools_count) == ("silent", 0)
            assert server.status in ("connecting", "error")
            if server.status == "error":
                assert "did not answer initialize and tools/list within 1 s" in server.error
            client.send(ChainRequest(id="c", nodes=[
                ChainNode(node_id="s", kind="tool", name="silent.anything"),
                ChainNode(node_id="e", kind="tool", name="echo", input={"v": 1})],
                entry_node="e"))
            resp = await client.receive()
            assert isinstance(resp, ChainResponse) and resp.error is not None
            assert resp.error.code == "chain_invalid"
            assert "unknown tool 'silent.anything'" in resp.error.message
            client.send(ChainRequest(id="d", nodes=[
                ChainNode(node_id="e", kind="tool", name="echo", input={"v": 1})],
                entry_node="e", streaming=False))
            resp = await client.receive()
            assert isinstance(resp, ChainResponse) and resp.final_output == {"v": 1}
        await host.aclose()
    assert _silent_children() == []  # stopped with the host
    # start_timeout (1 s), with room for a loaded box
    assert started < 10.0, started
