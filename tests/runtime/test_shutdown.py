"""Stopping the real host with work in flight (PROTOCOL.md §2 ``shutdown``; commands/serve.py
SIGINT/SIGTERM): the chain in flight gets exactly one response, then the connection closes
and the process exits 0."""

from __future__ import annotations

import json
import signal
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect

from tests.support.process import STARTUP, open_host
from tests.support.requests import HANDSHAKE, sleeper
from tests.support.stdio import STDIO
from tests.support.ws import SERVE, hello, receive, reply, wait_closed, wait_started

PROMPT = 5.0  # seconds: far below the 30 s sleep, far above a 1 s shutdown timeout

@pytest.mark.asyncio
async def test_stdio_shutdown_timeout_1_cancels_a_30s_sleep_then_exits_0() -> None:
    async with anyio.create_task_group() as tg:
        host = await open_host(STDIO)
        tg.start_soon(host.collect_stderr)
        await host.send(HANDSHAKE, sleeper("long", 30))
        assert (await host.receive())["ok"]
        assert (await host.receive())["phase"] == "start"
        await host.send({"type": "shutdown", "id": "sd", "timeout": 1})
        with anyio.fail_after(PROMPT):
            got = []
            while not got or got[-1]["type"] != "chain/resp":
                got.append(await host.receive())
            rest = await host.read_rest()
            code = await host.process.wait()
        tg.cancel_scope.cancel()
    resp = got[-1]
    assert (resp["req_id"], resp["success"], resp["error"]["code"]) == (
        "long", False, "cancelled"
    ), resp
    assert [(m["type"], m.get("phase")) for m in got[:-1]] == [("chain/event", "error")], got
    assert rest == b"", f"nothing may follow the last response: {rest[:300]!r}"
    assert code == 0, host.stderr[-2000:]

@pytest.mark.asyncio
async def test_ws_shutdown_timeout_1_cancels_a_30s_sleep_then_closes_1000() -> None:
    async with anyio.create_task_group() as tg:
        host = await open_host(SERVE)
        tg.start_soon(host.collect_stderr)
        with anyio.fail_after(STARTUP):
            found = await host.wait_stderr(r"a2e-host listening on (ws://127\.0\.0\.1:\d+)")
        async with connect(found.group(1)) as ws, connect(found.group(1)) as other:
            await hello(ws)
            await hello(other)
            await ws.send(json.dumps(sleeper("long", 30)))
            await wait_started(ws, "long")
            await other.send(json.dumps({"type": "ping", "id": "before"}))
            assert (await receive(other))["req_id"] == "before"
            await ws.send(json.dumps({"type": "shutdown", "id": "sd", "timeout": 1}))
            with anyio.fail_after(PROMPT):
                resp = await reply(ws)
                code = await wait_closed(ws)
            assert (resp["req_id"], resp["error"]["code"]) == ("long", "cancelled"), resp
            assert code == 1000
            await other.send(json.dumps({"type": "ping", "id": "after"}))
            pong = await receive(other)
            assert (pong["type"], pong["req_id"]) == ("pong", "after"), (
                "a shutdown message closes its own connection, not the host's others"
            )
        host.process.send_signal(signal.SIGTERM)
        assert await host.wait() == 0
        tg.cancel_scope.cancel()

@pytest.mark.asyncio
async def test_sigterm_to_serve_with_a_streaming_map_in_flight_sends_all_then_1001() -> None:
    nodes = [
        {"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t"},
        {"node_id": "t", "kind": "tool", "name": "sleep", "input_map": {"value": "item"},
         "input": {"seconds": 0.3}},
    ]
    async with anyio.create_task_group() as tg:
        host = await open_host(SERVE)
        tg.start_soon(host.collect_stderr)
        with anyio.fail_after(STARTUP):
            found = await host.wait_stderr(r"a2e-host listening on (ws://127\.0\.0\.1:\d+)")
        async with connect(found.group(1)) as ws, connect(found.group(1)) as idle:
            await hello(ws)
            await hello(idle)
            await ws.send(json.dumps({"type": "chain/req", "id": "m", "nodes": nodes,
                                      "entry_node": "m", "initial_input": {"xs": [1, 2, 3]}}))
            await wait_started(ws, "m")
            host.process.send_signal(signal.SIGTERM)
            events = []
            while (message := await receive(ws))["type"] == "chain/event":
                events.append(message)
            assert (message["req_id"], message["success"]) == ("m", True), message
            assert message["final_output"] == [
                {"slept": 0.3, "value": x} for x in (1, 2, 3)
            ], message
            assert [e["seq"] for e in events] == list(range(2, 2 + len(events)))
            assert await wait_closed(ws) == 1001
            assert await wait_closed(idle) == 1001
        assert await host.wait() == 0
        tg.cancel_scope.cancel()
    assert b"Traceback" not in host.stderr

@pytest.mark.asyncio
async def test_sigint_to_stdio_finishes_the_chain_and_a_second_sigint_cancels_at_once() -> None:
    async with anyio.create_task_group() as tg:
        host = await open_host(STDIO)
        tg.start_soon(host.collect_stderr)
        await host.send(HANDSHAKE, sleeper("short", 0.3), sleeper("long", 30))
        assert (await host.receive())["ok"]
        starts = {(await host.receive())["req_id"] for _ in range(2)}
        assert starts == {"short", "long"}
        host.process.send_signal(signal.SIGINT)
        responses: dict[str, dict[str, Any]] = {}
        while "short" not in responses:
            message = await host.receive()
            if message["type"] == "chain/resp":
                responses[message["req_id"]] = message
        host.process.send_signal(signal.SIGINT)
        with anyio.fail_after(PROMPT):
            while "long" not in responses:
                message = await host.receive()
                if message["type"] == "chain/resp":
                    assert message["req_id"] not in responses, f"second response: {message}"
                    responses[message["req_id"]] = message
            rest = await host.read_rest()
            code = await host.process.wait()
        tg.cancel_scope.cancel()
    assert responses["short"]["success"] is True, responses["short"]
    assert responses["long"]["error"]["code"] == "cancelled", responses["long"]
    assert rest == b"", rest[:300]
    assert code == 0, host.stderr[-2000:]
    assert b"Traceback" not in host.stderr, host.stderr[-3000:]

