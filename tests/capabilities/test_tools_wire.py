"""The ``tools`` capability over the real transports (PROTOCOL.md §11): the real CLI over
stdio and a real server on 127.0.0.1 over WebSocket, every response checked against the
public SDK's models."""

from __future__ import annotations

import json

import anyio
import pytest
from websockets.asyncio.client import connect

from tests.support.process import CLI
from tests.support.sdk import assert_sdk_accepts
from tests.support.stdio import stdio_host, stdio_process
from tests.support.tools import TOOL_CAPS, call_events, call_req, list_req
from tests.support.ws import call, receive, serving

ADD_SCHEMA = {
    "type": "object",
    "properties": {
        "a": {"anyOf": [{"type": "integer"}, {"type": "number"}]},
        "b": {"anyOf": [{"type": "integer"}, {"type": "number"}]},
    },
    "required": ["a", "b"],
}
PROGRESS_EVENTS = [
    {"pct": 33, "message": "step 1 of 3"},
    {"pct": 66, "message": "step 2 of 3"},
    {"pct": 100, "message": "step 3 of 3"},
]
CONFORMANCE_TOOLS = ["add", "big", "concat", "count", "echo", "fail", "flaky", "progress",
                     "sleep", "upper"]


def check_listing(resp: dict) -> None:
    assert_sdk_accepts(resp)
    assert resp["type"] == "tool/list/resp" and resp["req_id"] == "l1"
    assert [t["name"] for t in resp["tools"]] == CONFORMANCE_TOOLS
    add = next(t for t in resp["tools"] if t["name"] == "add")
    assert add["input_schema"] == ADD_SCHEMA
    assert add["input_parameters"] == [
        {"name": "a", "type": "number", "description": "", "required": True, "enum": None,
         "properties": None},
        {"name": "b", "type": "number", "description": "", "required": True, "enum": None,
         "properties": None},
    ]
    assert add["output_schema"]["required"] == ["sum"]
    assert (add["toolkit"], add["version"], add["side_effects"]) == ("conformance", "1", "none")
    progress = next(t for t in resp["tools"] if t["name"] == "progress")
    assert (progress["streaming"], progress["tags"]) == (True, ["fixture", "progress"])


def check_progress_call(events: list[dict], resp: dict, req_id: str) -> None:
    for event in events:
        assert_sdk_accepts(event)
    assert_sdk_accepts(resp)
    assert [(e["kind"], e["seq"], e["data"]) for e in events] == [
        ("progress", i + 1, data) for i, data in enumerate(PROGRESS_EVENTS)
    ]
    assert resp["type"] == "tool/call/resp" and resp["req_id"] == req_id
    result = resp["data"]
    assert (result["success"], result["tool_name"], result["data"]) == (
        True, "progress", {"steps": 3, "reported": 3})
    assert (result["error"], result["error_code"], result["events"]) == (None, None, [])


@pytest.mark.asyncio
async def test_over_stdio_an_agent_lists_tools_with_schemas_and_calls_one_with_progress() -> None:
    async with stdio_host(caps=TOOL_CAPS) as client:
        meta = next(c["metadata"] for c in client.handshake["accepted_caps"]
                    if c["capability"] == "tools")
        assert (meta["tool_count"], meta["tools"], meta["toolkits"]) == (
            10, CONFORMANCE_TOOLS, ["conformance"])
        assert_sdk_accepts(client.handshake)
        await client.send(list_req("l1"))
        check_listing(await client.host.receive())
        await client.send(call_req("c1", "progress", {"steps": 3}, streaming=True))
        events, resp = await call_events(client.host.receive, "c1")
        check_progress_call(events, resp, "c1")
        await client.send(call_req("c2", "add", {"a": 2, "b": 3}))
        events, resp = await call_events(client.host.receive, "c2")
        assert_sdk_accepts(resp)
        assert (events, resp["data"]["success"], resp["data"]["data"]) == ([], True, {"sum": 5})


@pytest.mark.asyncio
async def test_over_websocket_an_agent_lists_tools_and_calls_one_with_progress() -> None:
    async with serving() as (url, _), connect(url) as ws:
        hello = await call(ws, {"type": "handshake/req", "id": "h", "agent_caps": list(TOOL_CAPS)})
        assert [c["capability"] for c in hello["accepted_caps"]] == ["chains", "tools"]
        await ws.send(json.dumps(list_req("l1")))
        check_listing(await receive(ws))
        await ws.send(json.dumps(call_req("c1", "progress", {"steps": 3}, streaming=True)))
        events, resp = await call_events(lambda: receive(ws), "c1")
        check_progress_call(events, resp, "c1")


@pytest.mark.asyncio
async def test_a_session_not_granted_tools_gets_capability_missing() -> None:
    async with stdio_host(caps=("chains",)) as client:
        for message in (list_req("l1"), call_req("c1", "add", {"a": 1, "b": 2})):
            await client.send(message)
            err = await client.host.receive()
            assert_sdk_accepts(err)
            assert (err["type"], err["code"], err["req_id"], err["capability_name"]) == (
                "error", "capability_missing", message["id"], "tools")


@pytest.mark.asyncio
async def test_a_host_serving_no_tools_does_not_grant_tools() -> None:
    async with stdio_process([*CLI, "stdio", "--tools", ""]) as host:
        await host.send({"type": "handshake/req", "id": "h", "agent_caps": ["chains", "tools"]})
        hello = await host.receive()
        assert [c["capability"] for c in hello["accepted_caps"]] == ["chains"]
        await host.send(list_req("l1"))
        err = await host.receive()
        assert (err["code"], err["req_id"]) == ("capability_missing", "l1")
        assert err["message"].endswith(
            "which this session was not granted; this host does not serve it; to serve it, "
            "start the host with --tools PACK (e.g. --tools fs,text,json; 'a2e-host tools "
            "--all' lists the installed packs), or tools in its config (A2E_TOOLS)")


@pytest.mark.asyncio
async def test_hostile_calls_get_clear_errors_and_the_session_goes_on() -> None:
    async with stdio_host(caps=TOOL_CAPS, max_output_bytes=1_000_000, max_timeout=60,
                          max_message_bytes=3_000_000) as client:
        async def ask(message: dict) -> dict:
            await client.send(message)
            events, resp = await call_events(client.host.receive, message["id"])
            assert events == []
            assert_sdk_accepts(resp)
            return resp

        err = await ask(call_req("u", "ad", {}))
        assert (err["type"], err["code"]) == ("error", "unknown_tool")
        assert err["detail"] == {"tool": "ad", "suggestions": ["add"]}
        assert "did you mean 'add'?" in err["message"] and "tool/list/req" in err["message"]

        bad = (await ask(call_req("b", "add", {"a": "x", "b": 1})))["data"]
        assert (bad["success"], bad["error_code"], bad["data"]) == (False, "invalid_input", None)
        assert bad["error"] == ("input field 'a' of tool 'add' must be a number, but arguments "
                                "give string 'x' (at arguments.a)")

        missing = (await ask(call_req("m", "add", {"a": 1})))["data"]
        assert (missing["error_code"], missing["error"]) == (
            "invalid_input", "tool 'add' requires input field 'b', which arguments lack "
            "(at arguments.b)")

        huge = (await ask(call_req("h", "echo", {"text": "x" * 2_000_000})))["data"]
        assert (huge["success"], huge["error_code"]) == (False, "chain_limit")
        assert huge["error"] == ("tool 'echo' output is at least 2000011 bytes, over "
                                "max_output_bytes 1000000")

        await client.send(call_req("x", "echo", {"text": "x" * 4_000_000}))
        too_large = await client.host.receive()
        assert_sdk_accepts(too_large)
        assert (too_large["type"], too_large["code"]) == ("error", "message_too_large")
        assert "3000000" in too_large["message"]

        slow = (await ask(call_req("t", "sleep", {"seconds": 30}, timeout=1)))["data"]
        assert (slow["success"], slow["error_code"]) == (False, "timeout")
        assert slow["error"].startswith("tool 'sleep' did not finish within the call's timeout "
                                        "of 1 s")
        assert slow["duration_ms"] < 10_000

        over = await ask(call_req("o", "add", {"a": 1, "b": 1}, timeout=61))
        assert (over["code"], over["detail"]) == (
            "chain_limit", {"ceiling": "max_timeout", "scope": "session", "limit": 60,
                            "requested": 61})

        failed = (await ask(call_req("f", "fail", {"message": "boom"})))["data"]
        assert (failed["success"], failed["error_code"], failed["error"]) == (
            False, "tool_error", "boom")

        ok = (await ask(call_req("ok", "add", {"a": 1, "b": 2})))["data"]
        assert ok["data"] == {"sum": 3}


@pytest.mark.asyncio
async def test_a_tool_flooding_progress_is_capped_and_other_sessions_are_served() -> None:
    async with serving() as (url, _), connect(url, max_size=None) as flood, \
            connect(url) as other:
        for ws in (flood, other):
            assert (await call(ws, {"type": "handshake/req", "id": "h",
                                    "agent_caps": list(TOOL_CAPS)}))["ok"]
        await flood.send(json.dumps(call_req("f", "progress", {"steps": 100_000},
                                             streaming=True)))
        answers: dict[str, int] = {}

        async def served() -> None:
            for i in range(20):
                await other.send(json.dumps(call_req(f"o{i}", "add", {"a": i, "b": 1})))
                resp = await receive(other)
                answers[resp["req_id"]] = resp["data"]["data"]["sum"]

        async with anyio.create_task_group() as tg:
            tg.start_soon(served)
            events, resp = await call_events(lambda: receive(flood), "f")
        assert answers == {f"o{i}": i + 1 for i in range(20)}
        assert len(events) == 256
        assert [e["seq"] for e in events] == list(range(1, 257))
        assert resp["data"]["data"] == {"steps": 100_000, "reported": 256}
