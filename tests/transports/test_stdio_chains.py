"""``a2e-host stdio --tools conformance`` with the real chains plugin: chains over NDJSON,
stdout stays protocol-only even when a proc writes to its stdout."""

from __future__ import annotations

import json

import anyio
import pytest

from tests.support.process import CLI, open_host

HANDSHAKE = {"type": "handshake/req", "id": "h", "agent_caps": ["chains", "proc"]}


@pytest.mark.asyncio
async def test_proc_output_and_chain_events_leave_stdout_pure_ndjson() -> None:
    chain = {
        "type": "chain/req", "id": "c", "entry_node": "say",
        "nodes": [
            {"node_id": "say", "kind": "proc", "input": {"argv": ["echo", "from a proc"]},
             "next_node": "up"},
            {"node_id": "up", "kind": "tool", "name": "upper",
             "input_map": {"text": "say.output.stdout"}},
        ],
    }
    async with anyio.create_task_group() as tg:
        host = await open_host([*CLI, "stdio", "--tools", "conformance", "--allow-proc", "echo"])
        tg.start_soon(host.collect_stderr)
        await host.send(HANDSHAKE, chain)
        await host.process.stdin.aclose()  # type: ignore[union-attr]
        out = await host.read_rest()
        assert await host.wait() == 0
    replies = [json.loads(line) for line in out.splitlines()]
    assert replies[0]["ok"] is True
    final = replies[-1]
    assert final["type"] == "chain/resp", host.stderr.decode()[-2000:]
    assert final["success"] is True and final["final_output"] == {"text": "FROM A PROC\n"}
    assert [r["seq"] for r in replies[1:-1]] == [1, 2, 3, 4]


@pytest.mark.asyncio
async def test_shutdown_cancels_a_sleeping_chain_and_still_sends_its_response() -> None:
    chain = {
        "type": "chain/req", "id": "s", "entry_node": "zz", "streaming": False,
        "nodes": [{"node_id": "zz", "kind": "tool", "name": "sleep", "input": {"seconds": 60}}],
    }
    async with anyio.create_task_group() as tg:
        host = await open_host([*CLI, "stdio", "--tools", "conformance"])
        tg.start_soon(host.collect_stderr)
        await host.send(HANDSHAKE, chain)
        assert (await host.receive())["ok"] is True
        await host.send({"type": "ping", "id": "p"})
        assert (await host.receive())["req_id"] == "p"
        await host.send({"type": "shutdown", "timeout": 0})
        resp = await host.receive()
        assert await host.wait() == 0
    assert (resp["type"], resp["req_id"], resp["success"]) == ("chain/resp", "s", False)
    assert resp["error"]["code"] == "cancelled"
