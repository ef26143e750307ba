"""``a2e-host serve --tools conformance`` with the real chains plugin over WebSocket."""

from __future__ import annotations

import json

import anyio
import pytest
from websockets.asyncio.client import connect

from tests.support.process import CLI
from tests.support.requests import HANDSHAKE
from tests.support.ws import call, receive
from tests.support.ws import serving_argv as serving


def add_chain(req_id: str, a: int) -> dict:
    return {
        "type": "chain/req", "id": req_id, "entry_node": "a", "streaming": False,
        "nodes": [{"node_id": "a", "kind": "tool", "name": "add", "input": {"a": a, "b": 1}}],
    }


@pytest.mark.asyncio
async def test_fifty_clients_times_twenty_chains_each_get_exactly_one_response() -> None:
    flags = ("--port", "0", "--tools", "conformance")
    async with serving(CLI, *flags, A2E_MAX_PARALLEL="32") as (url, _):
        results: dict[int, dict[str, int]] = {}

        async def client(n: int) -> None:
            async with connect(url) as ws:
                assert (await call(ws, HANDSHAKE))["ok"]
                for i in range(20):
                    await ws.send(json.dumps(add_chain(f"{n}-{i}", i)))
                got = [await receive(ws) for _ in range(20)]
                results[n] = {m["req_id"]: m["final_output"]["sum"] for m in got}

        async with anyio.create_task_group() as tg:
            for n in range(50):
                tg.start_soon(client, n)
    assert results == {n: {f"{n}-{i}": i + 1 for i in range(20)} for n in range(50)}


@pytest.mark.asyncio
async def test_a_dropped_client_cancels_its_chain_and_the_host_keeps_serving() -> None:
    sleeper = {
        "type": "chain/req", "id": "z", "entry_node": "zz",
        "nodes": [{"node_id": "zz", "kind": "tool", "name": "sleep", "input": {"seconds": 60}}],
    }
    async with serving(CLI, "--port", "0", "--tools", "conformance") as (url, host):
        async with connect(url) as ws:
            assert (await call(ws, HANDSHAKE))["ok"]
            await ws.send(json.dumps(sleeper))
            assert (await receive(ws))["phase"] == "start"
        with anyio.fail_after(15):
            await host.wait_stderr("peer gone; cancelling")
        async with connect(url) as ws:
            assert (await call(ws, HANDSHAKE))["ok"]
            resp = await call(ws, add_chain("after", 41))
            assert resp["final_output"] == {"sum": 42}
