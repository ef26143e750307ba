"""One WebSocket connection never disturbs another on the real ``a2e-host serve``
(PROTOCOL.md §1, §6): bad frames on one leave a streaming map on another intact, and a
session's lowered ``max_parallel`` is its own."""

from __future__ import annotations

import json

import pytest
from websockets.asyncio.client import connect

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
