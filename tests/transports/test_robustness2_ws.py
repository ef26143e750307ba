"""More hostile WebSocket clients against the real ``a2e-host serve`` on 127.0.0.1
(PROTOCOL.md §1, §2, §5 cancellation, §6): auth and origin refusals, a client that never
reads, cancel racing completion, and a session asking to raise ``max_parallel``."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from tests.support.process import WAIT, peak_rss_kib
from tests.support.requests import HANDSHAKE
from tests.support.ws import (
    chain_frame,
    echo_node,
    hello,
    receive,
    reply,
    serving,
    sleep_node,
    wait_closed,
)


async def send(ws: ClientConnection, message: dict[str, Any] | str) -> None:
    await ws.send(message if isinstance(message, str) else json.dumps(message))


# ── auth and origin ──────────────────────────────────────────────────────────────


@pytest.mark.asyncio
async def test_missing_or_wrong_token_is_auth_failed_then_closed_and_no_work_is_taken() -> None:
    # failed auths are throttled (auth_failure_delay); this test is about the answer
    async with serving("--auth-token", "T0k", env={"A2E_AUTH_FAILURE_DELAY": "0.05"}) as (url, _):
        for extra in ({}, {"auth_token": ""}, {"auth_token": "T0k "}, {"auth_token": "t0k"}):
            async with connect(url) as ws:
                await send(ws, {**HANDSHAKE, **extra})
                await send(ws, chain_frame("after", echo_node(1)))
                resp = await receive(ws)
                assert (resp["type"], resp["ok"], resp["reason"]) == (
                    "handshake/resp", False, "auth_failed"
                ), (extra, resp)
                assert resp["session_id"] == "", f"no session for a refused client: {resp}"
                assert await wait_closed(ws) == 1008, extra
        for header in ("Bearer wrong", "Basic VDBrOg==", "T0k"):
            async with connect(url, additional_headers={"Authorization": header}) as ws:
                await send(ws, HANDSHAKE)
                resp = await receive(ws)
                assert (resp["ok"], resp["reason"]) == (False, "auth_failed"), (header, resp)
        async with connect(url, additional_headers={"Authorization": "Bearer T0k"}) as ws:
            await hello(ws)
            await send(ws, chain_frame("ok", echo_node(2)))
            assert (await reply(ws))["final_output"] == {"v": 2}


@pytest.mark.asyncio
async def test_any_browser_origin_is_refused_403_when_none_is_allowed() -> None:
    async with serving() as (url, _):
        for origin in ("http://127.0.0.1", "http://localhost:8765", "null", "file://"):
            with pytest.raises(InvalidStatus) as info:
                async with connect(url, origin=origin):  # type: ignore[arg-type]
                    pass
            assert info.value.response.status_code == 403, origin
        async with connect(url) as ws:
            await hello(ws)


# ── a client that never reads ────────────────────────────────────────────────────


@pytest.mark.asyncio
async def test_a_client_that_never_reads_a_million_event_chain_bounds_memory_and_is_cancelled(
) -> None:
    """outbox.py: "a slow reader slows them down instead of growing memory"; five parallel
    root maps over 100,000 items each stream 1,000,000 events to a reader that reads none."""
    nodes: list[dict[str, Any]] = []
    for k in range(5):
        nodes += [
            {"node_id": f"m{k}", "kind": "map", "items_path": "input.xs", "map_node": f"t{k}"},
            {"node_id": f"t{k}", "kind": "tool", "name": "echo", "input_map": {"i": "item"},
             "input": {"pad": "p" * 20}},
        ]
    finished = r'"req_id": "flood"[^\n]*"event": "chain finished"'
    async with serving() as (url, host), connect(url) as other:
        await hello(other)
        slow = await connect(url, max_queue=1)
        await hello(slow)
        await send(slow, chain_frame("flood", nodes, initial_input={"xs": list(range(100_000))}))
        peaks = []
        for n in range(60):  # about 6 s of the flood against a reader that never reads
            await send(other, {"type": "ping", "id": f"p{n}"})
            pong = await receive(other)
            assert (pong["type"], pong["req_id"]) == ("pong", f"p{n}"), pong
            peaks.append(peak_rss_kib(host.process.pid))
            with anyio.move_on_after(0.1):
                await anyio.Event().wait()
        ran_to_the_end = re.search(finished, host.stderr.decode("utf-8", "replace"))
        slow.transport.abort()
        with anyio.fail_after(WAIT):
            ended = await host.wait_stderr(finished)
        await send(other, chain_frame("after", echo_node(5)))
        assert (await reply(other))["final_output"] == {"v": 5}
    assert max(peaks) < 400 * 1024, (
        f"host peak RSS {max(peaks) // 1024} MiB with a reader that never reads: map item "
        f"events are queued without waiting on the outbox high-water mark"
    )
    assert ran_to_the_end is None, (
        "the chain ran to completion while its only reader read nothing (no backpressure)"
    )
    assert '"code": "cancelled"' in ended.group(0), ended.group(0)


# ── cancel racing completion ─────────────────────────────────────────────────────


@pytest.mark.asyncio
async def test_cancel_racing_completion_never_gives_two_responses() -> None:
    rounds = 300
    async with serving() as (url, _), connect(url) as ws:
        await hello(ws)
        responses: Counter[str] = Counter()
        errors: list[dict[str, Any]] = []
        outcomes: Counter[str] = Counter()
        for first in range(0, rounds, 4):  # max_parallel chains at a time, each raced
            batch = range(first, min(first + 4, rounds))
            for n in batch:
                nodes = echo_node(n) if n % 2 else sleep_node(0.001 * (n % 7))
                await ws.send(chain_frame(f"r{n}", nodes))
                await send(ws, {"type": "chain/cancel", "id": f"c{n}", "req_id": f"r{n}"})
            while any(responses[f"r{n}"] == 0 for n in batch):
                message = await receive(ws)
                if message["type"] == "chain/resp":
                    responses[message["req_id"]] += 1
                    n = int(message["req_id"][1:])
                    if message["success"]:
                        expected = (
                            {"v": n} if n % 2 else {"slept": 0.001 * (n % 7), "value": None}
                        )
                        assert message["final_output"] == expected, message
                        outcomes["done"] += 1
                    else:
                        assert message["error"]["code"] == "cancelled", message
                        outcomes["cancelled"] += 1
                elif message["type"] == "error":
                    errors.append(message)
        await send(ws, {"type": "ping", "id": "end"})
        while (message := await receive(ws))["type"] != "pong":
            if message["type"] == "chain/resp":
                responses[message["req_id"]] += 1
            elif message["type"] == "error":
                errors.append(message)
    assert [r for r, k in responses.items() if k != 1] == [], "a request answered twice"
    assert set(responses) == {f"r{n}" for n in range(rounds)}
    assert {e["code"] for e in errors} <= {"invalid_message"}, errors[:3]
    assert all(e["req_id"].startswith("c") for e in errors), errors[:3]
    assert len(errors) <= outcomes["done"], (outcomes, len(errors))


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
