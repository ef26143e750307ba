"""What a session may ask of the host's ceilings in its handshake, on real hosts
(PROTOCOL.md §1, §6): a bad ``limits`` field is a schema violation naming its path, a
session can lower a ceiling but never raise it above the host's, and ``max_parallel`` as
published is the one enforced (``busy`` past it)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect

from tests.support.process import open_host
from tests.support.requests import chain, error_of, sleeper, tool
from tests.support.stdio import STDIO, stdio_host
from tests.support.ws import (
    chain_frame,
    hello,
    receive,
    reply,
    send,
    serving,
    sleep_node,
)

BAD_LIMITS: list[tuple[dict[str, Any], str]] = [
    ({"max_nodes": -1}, "$.limits.max_nodes"),
    ({"max_nodes": 0}, "$.limits.max_nodes"),
    ({"nope": 1}, "$.limits.nope"),
    ({"max_nodes": "x"}, "$.limits.max_nodes"),
    ({"max_nodes": 1.5}, "$.limits.max_nodes"),
]


@pytest.mark.parametrize(("limits", "path"), BAD_LIMITS)
@pytest.mark.asyncio
async def test_handshake_with_bad_limits_is_schema_violation_naming_the_ceiling(
    limits: dict[str, Any], path: str
) -> None:
    """PROTOCOL.md §1: a field of the wrong type is an error naming the field's path."""
    async with anyio.create_task_group() as tg:
        host = await open_host(STDIO)
        tg.start_soon(host.collect_stderr)
        await host.send(
            {"type": "handshake/req", "id": "h", "agent_caps": ["chains"], "limits": limits},
            {"type": "chain/req", "id": "early", "nodes": []},
            {"type": "ping", "id": "p"},
        )
        got = [await host.receive() for _ in range(3)]
        assert host.process.stdin is not None
        await host.process.stdin.aclose()
        assert await host.wait() == 0
    err = got[0]
    assert (err["type"], err["code"], err["req_id"]) == ("error", "schema_violation", "h"), err
    assert [(m["type"], m.get("code")) for m in got[1:]] == [
        ("error", "handshake_required"), ("pong", None)
    ]
    assert err["detail"]["path"] == path, (
        f"limits {limits}: detail.path is {err['detail']['path']!r}, should name {path!r}"
    )


@pytest.mark.asyncio
async def test_a_session_cannot_raise_a_ceiling_above_the_host() -> None:
    async with stdio_host(max_nodes=20_000) as client:
        meta = client.handshake["accepted_caps"][0]["metadata"]
        nodes = [tool(f"n{i}", "echo", next_node=f"n{i + 1}" if i < 10_000 else "")
                 for i in range(10_001)]
        _, resp = await client.run(chain("many", nodes, streaming=False))
    assert meta["limits"]["max_nodes"] == 10_000
    assert error_of(resp)["code"] == "chain_limit"


@pytest.mark.asyncio
async def test_more_than_max_parallel_chains_get_busy_and_the_rest_finish() -> None:
    async with stdio_host() as client:
        assert client.handshake["max_parallel"] == 4
        for i in range(4):
            await client.send(sleeper(f"s{i}", 30))
        started = set()
        while len(started) < 4:
            event = await client.host.receive()
            assert event["phase"] == "start", event
            started.add(event["req_id"])
        await client.send(sleeper("fifth", 0))
        busy = await client.reply()
        assert (busy["type"], busy["code"], busy["req_id"], busy["retryable"]) == (
            "error", "busy", "fifth", True
        ), busy
        for i in range(4):
            await client.send({"type": "chain/cancel", "id": f"c{i}", "req_id": f"s{i}"})
        ended = set()
        while len(ended) < 4:
            resp = await client.reply()
            assert resp["type"] == "chain/resp" and resp["error"]["code"] == "cancelled", resp
            ended.add(resp["req_id"])
        _, resp = await client.run(chain("later", [tool("a", "echo", input={"k": 2})]))
        assert resp["success"], "a slot is free again after the cancels"


@pytest.mark.asyncio
async def test_a_session_asking_max_parallel_20_gets_4_published_and_enforced() -> None:
    async with serving() as (url, _), connect(url) as ws:
        resp = await hello(ws, max_parallel=20)
        meta = resp["accepted_caps"][0]["metadata"]
        assert (resp["max_parallel"], meta["limits"]["max_parallel"]) == (4, 4), resp
        for n in range(20):
            await ws.send(chain_frame(f"s{n}", sleep_node(60)))
        busy, started = [], set()
        while len(busy) + len(started) < 20:
            message = await receive(ws)
            if message["type"] == "error":
                assert message["code"] == "busy" and "max_parallel" in message["message"], message
                busy.append(message["req_id"])
            else:
                assert (message["type"], message["phase"]) == ("chain/event", "start"), message
                started.add(message["req_id"])
        assert (len(started), len(busy)) == (4, 16), (started, busy)
        for r in sorted(started):
            await send(ws, {"type": "chain/cancel", "id": f"x{r}", "req_id": r})
        codes = set()
        while len(codes) < 4:
            message = await reply(ws)
            assert message["type"] == "chain/resp", message
            codes.add((message["req_id"], message["error"]["code"]))
        assert codes == {(r, "cancelled") for r in started}
