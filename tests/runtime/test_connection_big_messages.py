"""A big message is decoded with the cyclic collector paused (issue 12: no request may
stall the others): decoding 14 MB of nested lists took 2 s on the loop, most of it
garbage collection over the message's own new containers."""

from __future__ import annotations

import gc
import json
import time

import anyio
import pytest
from websockets.asyncio.client import connect

from a2e_host.chains.messages import chain_codec
from a2e_host.codec import core_codec
from a2e_host.messages import Ping
from a2e_host.runtime import decode
from tests.support.ws import hello, receive, reply, serving


def test_decoding_without_gc_restores_the_collector_as_it_found_it() -> None:
    assert gc.isenabled()
    message = decode._decode_without_gc(core_codec, b'{"type":"ping","id":"p1"}')
    assert isinstance(message, Ping) and message.id == "p1"
    assert gc.isenabled() and decode._gc_pausers == 0
    gc.disable()
    try:
        decode._decode_without_gc(core_codec, b'{"type":"ping","id":"p2"}')
        assert not gc.isenabled()  # it was off: it stays off
    finally:
        gc.enable()
    with pytest.raises(Exception):  # noqa: B017 — any decode error; the state is the point
        decode._decode_without_gc(core_codec, b"{not json")
    assert gc.isenabled() and decode._gc_pausers == 0


@pytest.mark.asyncio
async def test_another_sessions_pings_are_answered_while_a_big_message_is_decoded() -> None:
    nested = [[[[i]]] for i in range(600_000)]  # ~8 MB, ~2.4 million containers
    request = json.dumps({
        "type": "chain/req", "id": "big", "entry_node": "e", "streaming": False,
        "initial_input": {"x": nested},
        "nodes": [{"node_id": "e", "kind": "tool", "name": "echo", "input": {"ok": 1}}],
    })
    assert len(request) > 2_000_000
    # what decoding it on the loop cost: one stall, the collector running throughout
    t = time.perf_counter()
    chain_codec.decode(request.encode())
    on_the_loop = time.perf_counter() - t
    pongs: list[float] = []  # when each pong arrived
    first = anyio.Event()
    done = anyio.Event()
    async with serving() as (url, _), connect(url, max_size=2**25) as busy, \
            connect(url) as quiet:
        await hello(busy)
        await hello(quiet)

        async def probe() -> None:
            n = 0
            while not done.is_set():
                n += 1
                await quiet.send(json.dumps({"type": "ping", "id": f"p{n}"}))
                pong = await receive(quiet)
                assert pong["type"] == "pong", pong
                pongs.append(time.perf_counter())
                first.set()
                await anyio.sleep(0.01)

        async with anyio.create_task_group() as tg:
            tg.start_soon(probe)
            await first.wait()  # the probe is answered before the big message goes
            sent = time.perf_counter()
            await busy.send(request)
            response = await reply(busy)
            answered = time.perf_counter()
            done.set()
    assert response["success"] and response["final_output"] == {"ok": 1}, response
    # msgspec holds the interpreter lock while it decodes, so a thread cannot make the
    # decode itself free; what it buys is the collector paused: the longest wait of a
    # ping is well under what decoding on the loop stalled everyone for
    waits = [b - a for a, b in zip(pongs, pongs[1:], strict=False) if b > sent and a < answered]
    assert waits, pongs
    assert max(waits) < 0.6 * on_the_loop, (max(waits), on_the_loop)
