"""Hostile clients against a real ``a2e-host serve --tools conformance`` on 127.0.0.1
(PROTOCOL.md §1, §2, §6, §8): bad frames and vanished peers on one connection never
disturb another, and the host keeps serving."""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.support.fakes import CLI, WAIT, HostProcess, open_host

SERVE = [*CLI, "serve", "--port", "0", "--tools", "conformance"]


@asynccontextmanager
async def serving(
    *flags: str, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[str, HostProcess]]:
    """Start the real server (with extra ``flags`` and ``env`` variables) on a free port;
    yield its URL and process; SIGTERM it: it must exit 0 without a traceback."""
    async with anyio.create_task_group() as tg:
        host = await open_host([*SERVE, *flags], **(env or {}))
        tg.start_soon(host.collect_stderr)
        with anyio.fail_after(WAIT):
            found = await host.wait_stderr(r"a2e-host listening on (ws://127\.0\.0\.1:\d+)")
        try:
            yield found.group(1), host
        finally:
            host.process.send_signal(signal.SIGTERM)
            code = await host.wait()
            tg.cancel_scope.cancel()
        assert code == 0, host.stderr[-2000:]
        assert b"Traceback" not in host.stderr, host.stderr[-4000:].decode("utf-8", "replace")


async def receive(ws: ClientConnection) -> dict[str, Any]:
    with anyio.fail_after(WAIT):
        data = await ws.recv()
    assert isinstance(data, str)
    message = json.loads(data)
    assert isinstance(message, dict)
    return message


async def reply(ws: ClientConnection) -> dict[str, Any]:
    """The next message that is not a ``chain/event``."""
    while True:
        message = await receive(ws)
        if message["type"] != "chain/event":
            return message


async def hello(ws: ClientConnection, **limits: int) -> dict[str, Any]:
    message: dict[str, Any] = {"type": "handshake/req", "id": "h", "agent_caps": ["chains"]}
    if limits:
        message["limits"] = limits
    await ws.send(json.dumps(message))
    resp = await receive(ws)
    assert resp["type"] == "handshake/resp" and resp["ok"], resp
    return resp


def chain(req_id: str, nodes: list[dict[str, Any]], **fields: Any) -> str:
    return json.dumps({"type": "chain/req", "id": req_id, "session_id": "", "nodes": nodes,
                       "entry_node": nodes[0]["node_id"], **fields})


def sleep_node(seconds: float) -> list[dict[str, Any]]:
    return [{"node_id": "s", "kind": "tool", "name": "sleep", "input": {"seconds": seconds}}]


def echo_node(value: Any) -> list[dict[str, Any]]:
    return [{"node_id": "e", "kind": "tool", "name": "echo", "input": {"v": value}}]


async def wait_started(ws: ClientConnection, req_id: str) -> None:
    event = await receive(ws)
    assert (event["type"], event["req_id"], event["phase"]) == ("chain/event", req_id, "start")


@pytest.mark.asyncio
async def test_abrupt_tcp_close_mid_chain_cancels_it_and_leaves_other_clients_alone() -> None:
    async with serving() as (url, host), connect(url, subprotocols=["a2e.v1"]) as other:
        await hello(other)
        await other.send(chain("keep", sleep_node(60)))
        await wait_started(other, "keep")
        gone = await connect(url, subprotocols=["a2e.v1"])
        await hello(gone)
        await gone.send(chain("lost", sleep_node(60)))
        await wait_started(gone, "lost")
        gone.transport.abort()  # a TCP reset: no close frame
        with anyio.fail_after(WAIT):
            await host.wait_stderr(r"peer gone; cancelling[\s\S]*\"dropped\": true")
        await other.send(chain("quick", echo_node("ü\u2028")))
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
            await fresh.send(chain("new", echo_node(3)))
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
        await good.send(chain("map", nodes, initial_input={"xs": list(range(2_000))}))
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
        await one.send(chain("a", sleep_node(60)))
        await wait_started(one, "a")
        await one.send(chain("b", echo_node(1)))
        busy = await reply(one)
        assert (busy["type"], busy["code"], busy["req_id"]) == ("error", "busy", "b"), busy
        for i in range(3):
            await two.send(chain(f"t{i}", sleep_node(60)))
        await two.send(chain("t3", echo_node(2)))
        done = await reply(two)
        assert (done["req_id"], done["success"]) == ("t3", True), (
            "another session's max_parallel is its own"
        )
        await one.send(json.dumps({"type": "chain/cancel", "id": "c", "req_id": "a"}))
        assert (await reply(one))["error"]["code"] == "cancelled"
        await one.send(chain("b2", echo_node(4)))
        assert (await reply(one))["final_output"] == {"v": 4}
