"""``proc/kill/req`` and a spawn's ``timeout`` end the process's whole tree, a ``setsid``
grandchild that left its session included, over the real stdio CLI and a real WebSocket
server (issue 15: every guarantee a ``proc`` node has; PROTOCOL.md §10)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from websockets.asyncio.client import connect

from tests.support.process import CLI
from tests.support.procs import (
    ESCAPE,
    PROC_FLAGS,
    ProcWire,
    alive,
    gone,
    kill_if_alive,
    stdout_of,
)
from tests.support.stdio import handshake, stdio_process
from tests.support.ws import receive, serving_argv

pytestmark = pytest.mark.timeout(90)


@asynccontextmanager
async def wire_over(transport: str) -> AsyncIterator[ProcWire]:
    """A session granted ``proc`` on the real host, over ``transport``."""
    if transport == "stdio":
        async with stdio_process([*CLI, "stdio", *PROC_FLAGS]) as host:
            await handshake(host, ["proc"])
            yield ProcWire(host.send, host.receive)
        return
    async with serving_argv(CLI, "--port", "0", *PROC_FLAGS) as (url, _), \
            connect(url, subprotocols=["a2e.v1"]) as ws:  # type: ignore[list-item]
        await ws.send(json.dumps({"type": "handshake/req", "id": "h", "agent_caps": ["proc"]}))
        assert (await receive(ws))["ok"]

        async def send(message: dict[str, Any]) -> None:
            await ws.send(json.dumps(message))

        yield ProcWire(send, lambda: receive(ws))


async def escaped_tree(wire: ProcWire, **fields: Any) -> tuple[dict[str, Any], int]:
    """Spawn a shell whose ``setsid`` grandchild escapes its session; its spawn reply and
    the grandchild's pid, both alive."""
    shell = await wire.spawn(["sh", "-c", ESCAPE], **fields)
    assert shell["ok"], shell
    grandchild = int(stdout_of(await wire.until_output(shell["req_id"], "\n")))
    assert alive(shell["pid"]) and alive(grandchild)
    return shell, grandchild


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", ["stdio", "ws"])
async def test_proc_kill_ends_the_whole_tree_of_the_process(transport: str) -> None:
    async with wire_over(transport) as wire:
        shell, grandchild = await escaped_tree(wire)
        try:
            killed = await wire.request({"type": "proc/kill/req", "proc_id": shell["proc_id"]})
            assert {k: killed[k] for k in ("type", "ok", "state", "exit_code")} == {
                "type": "proc/kill/resp", "ok": True, "state": "stopped", "exit_code": -15}
            assert gone(shell["pid"]) and gone(grandchild), "the escaped grandchild lives on"
        finally:
            kill_if_alive(shell["pid"], grandchild)


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", ["stdio", "ws"])
async def test_a_spawn_timeout_ends_the_whole_tree_of_the_process(transport: str) -> None:
    async with wire_over(transport) as wire:
        shell, grandchild = await escaped_tree(wire, timeout=2)
        try:
            events = await wire.until_exit(shell["req_id"])
            assert {k: events[-1]["data"][k] for k in ("state", "exit_code")} == {
                "state": "timedout", "exit_code": -15}
            assert gone(shell["pid"]) and gone(grandchild), "the escaped grandchild lives on"
        finally:
            kill_if_alive(shell["pid"], grandchild)
