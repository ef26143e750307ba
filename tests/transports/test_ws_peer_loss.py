"""WebSocket clients that vanish or stop reading, against the real ``a2e-host serve``
on 127.0.0.1 (PROTOCOL.md §1, §8; outbox.py): a TCP reset mid-chain cancels that
client's chain only, and a client that never reads slows its chain down and bounds the
host's memory instead of growing it, until it is dropped and the chain cancelled."""

from __future__ import annotations

import json
import re
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect

from tests.support.process import WAIT, peak_rss_kib
from tests.support.ws import (
    chain_frame,
    echo_node,
    hello,
    receive,
    reply,
    send,
    serving,
    sleep_node,
    wait_started,
)


@pytest.mark.asyncio
async def test_abrupt_tcp_close_mid_chain_cancels_it_and_leaves_other_clients_alone() -> None:
    async with serving() as (url, host), connect(url, subprotocols=["a2e.v1"]) as other:
        await hello(other)
        await other.send(chain_frame("keep", sleep_node(60)))
        await wait_started(other, "keep")
        gone = await connect(url, subprotocols=["a2e.v1"])
        await hello(gone)
        await gone.send(chain_frame("lost", sleep_node(60)))
        await wait_started(gone, "lost")
        gone.transport.abort()  # a TCP reset: no close frame
        with anyio.fail_after(WAIT):
            await host.wait_stderr(r"peer gone; cancelling[\s\S]*\"dropped\": true")
        await other.send(chain_frame("quick", echo_node("ü\u2028")))
        quick = await reply(other)
        assert (quick["req_id"], quick["success"], quick["final_output"]) == (
            "quick", True, {"v": "ü\u2028"}
        )
        await other.send(json.dumps({"type": "chain/cancel", "id": "c", "req_id": "keep"}))
        kept = await reply(other)
        assert (kept["req_id"], kept["error"]["code"]) == ("keep", "cancelled"), (
            "the other client's chain was still running until its own cancel"
        )
        async with connect(url) as fresh:
            await hello(fresh)
            await fresh.send(chain_frame("new", echo_node(3)))
            assert (await reply(fresh))["final_output"] == {"v": 3}


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
