"""Hostile clients against a real ``a2e-host serve --tools conformance`` on 127.0.0.1
(PROTOCOL.md §1, §2, §6, §8): bad frames and vanished peers on one connection never
disturb another, and the host keeps serving."""

from __future__ import annotations

import json

import anyio
import pytest
from websockets.asyncio.client import connect

from tests.support.process import WAIT
from tests.support.ws import (
    chain_frame,
    echo_node,
    hello,
    receive,
    reply,
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


BAD_FRAMES: list[tuple[str | bytes, str]] = [
    ("not json", "parse_error"),
    ("[1,2]", "invalid_message"),
    ('{"type":"chain/resp","id":"r","req_id":"x"}', "invalid_message"),
    ('{"type":"pong","id":"p"}', "invalid_message"),
    (b"\x00\x01binary", "invalid_message"),
    ('{"type":"chain/req","id":"deep","initial_input":{"d":' + '{"a":' * 5000 + "0"
     + "}" * 5000 + "}}", "parse_error"),
    ('{"type":"chain/req","id":"num","initial_input":{"n":1' + "0" * 5000 + "}}",
     "parse_error"),
    ('{"type":"chain/req","id":"nd","nodes":{}}', "schema_violation"),
    ('{"type":"chain/cancel","id":"cx","req_id":"never"}', "invalid_message"),
]


@pytest.mark.asyncio
async def test_bad_frames_on_one_connection_leave_a_streaming_map_on_another_intact() -> None:
    nodes = [
        {"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t"},
        {"node_id": "t", "kind": "tool", "name": "add", "input": {"b": 1},
         "input_map": {"a": "item"}},
    ]
    async with serving() as (url, _), connect(url) as good, connect(url) as bad:
        await hello(good)
        await hello(bad)
        await good.send(chain_frame("map", nodes, initial_input={"xs": list(range(2_000))}))
        codes = []
        for frame in BAD_FRAMES:
            await bad.send(frame[0])
            err = await receive(bad)
            codes.append(err.get("code"))
            assert err["message"], err
        events = []
        while True:
            message = await receive(good)
            if message["type"] != "chain/event":
                break
            events.append(message)
        await bad.send(json.dumps({"type": "ping", "id": "p"}))
        pong = await receive(bad)
    assert codes == [code for _, code in BAD_FRAMES]
    assert (pong["type"], pong["req_id"]) == ("pong", "p")
    assert message["success"] and message["final_output"] == [{"sum": i + 1} for i in range(2_000)]
    assert [e["seq"] for e in events] == list(range(1, 4_003))


@pytest.mark.asyncio
async def test_session_lowered_max_parallel_is_busy_there_only() -> None:
    async with serving() as (url, _), connect(url) as one, connect(url) as two:
        await hello(one, max_parallel=1)
        await hello(two)
        await one.send(chain_frame("a", sleep_node(60)))
        await wait_started(one, "a")
        await one.send(chain_frame("b", echo_node(1)))
        busy = await reply(one)
        assert (busy["type"], busy["code"], busy["req_id"]) == ("error", "busy", "b"), busy
        for i in range(3):
            await two.send(chain_frame(f"t{i}", sleep_node(60)))
        await two.send(chain_frame("t3", echo_node(2)))
        done = await reply(two)
        assert (done["req_id"], done["success"]) == ("t3", True), (
            "another session's max_parallel is its own"
        )
        await one.send(json.dumps({"type": "chain/cancel", "id": "c", "req_id": "a"}))
        assert (await reply(one))["error"]["code"] == "cancelled"
        await one.send(chain_frame("b2", echo_node(4)))
        assert (await reply(one))["final_output"] == {"v": 4}
