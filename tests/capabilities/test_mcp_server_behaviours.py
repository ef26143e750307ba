"""MCP servers as tool sources (issue 20, PROTOCOL.md §12), against a small MCP server
written with the official SDK's server API (:mod:`tests.support.mcp_server`): its progress
notifications become ``progress`` chain events, an ``isError`` result fails the node with
the server's text, ``chain/cancel`` reaches it as ``notifications/cancelled``, a call past
the server's ``timeout`` is cancelled too, and a server that crashes or hangs is marked
unavailable with the reason and restarted with backoff, every behaviour seen through chain
events, responses and ``mcp/server/list``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.support.mcp_hosts import TEST_SERVER, hello_mcp, list_servers, serving_mcp_host, toml_of
from tests.support.requests import chain, tool
from tests.support.sdk import assert_sdk_accepts
from tests.support.ws import receive, reply, send

SUBPROTOCOL = "a2e.v1"
WAIT = 30.0
"""Generous bound, seconds, on a restart (backoff, then a Python server's start)."""


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One host for the module: the test server twice, pinged often, restarted after 1 s:
    ``test`` (calls time out after 3 s), and ``flaky``, which the tests crash and hang;
    agents may register the test server's command; messages (and an MCP server's lines)
    of at most 1 MiB."""
    text = toml_of([], {"start_timeout": 20, "ping_interval": 1, "ping_timeout": 3,
                        "restart_initial_delay": 1, "restart_max_delay": 1,
                        "register_commands": [TEST_SERVER]}, {
        "test": {"command": TEST_SERVER, "timeout": 3, "env": {"A2E_MCP_TEST": "given"}},
        "flaky": {"command": TEST_SERVER, "timeout": 20,
                  "tool_allow_list": ["big", "crash", "hang", "stats"]},
    }) + "\n[limits]\nmax_message_bytes = 1048576\n"
    with serving_mcp_host(tmp_path_factory.mktemp("mcp-test"), text) as served:
        yield served


async def _session(url: str) -> Any:
    ws = await connect(url, subprotocols=[SUBPROTOCOL])  # type: ignore[list-item]
    await hello_mcp(ws)
    return ws


async def _run(ws: ClientConnection, request: dict[str, Any]
               ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Send ``request``; its events and its response."""
    await send(ws, request)
    events = []
    while True:
        message = await receive(ws)
        if message["type"] == "chain/resp":
            return events, message
        events.append(message)


async def _server(ws: ClientConnection, name: str) -> dict[str, Any]:
    resp = await list_servers(ws)
    assert_sdk_accepts(resp)
    return next(s for s in resp["servers"] if s["name"] == name)


async def _wait_status(ws: ClientConnection, name: str, *statuses: str, error: str = ""
                       ) -> dict[str, Any]:
    """Poll ``mcp/server/list`` until ``name`` has one of ``statuses`` and an ``error``
    containing ``error`` (within :data:`WAIT`)."""
    with anyio.fail_after(WAIT):
        while True:
            server = await _server(ws, name)
            if server["status"] in statuses and error in server["error"]:
                return server
            await anyio.sleep(0.05)


@pytest.mark.asyncio
async def test_mcp_progress_notifications_become_progress_chain_events(url: str) -> None:
    async with await _session(url) as ws:
        events, resp = await _run(ws, chain("p", [tool("p", "test.progress",
                                                       input={"steps": 3})]))
    assert resp["success"] is True and resp["final_output"] == {"steps": 3}, resp
    reports = [e["data"] for e in events if e["kind"] == "progress"]
    assert reports == [
        {"report": "progress", "progress": 1.0, "total": 3.0, "pct": 33, "message": "step 1"},
        {"report": "progress", "progress": 2.0, "total": 3.0, "pct": 67, "message": "step 2"},
        {"report": "progress", "progress": 3.0, "total": 3.0, "pct": 100, "message": "step 3"},
    ]
    assert {e["phase"] for e in events if e["kind"] == "progress"} == {"start"}


@pytest.mark.asyncio
async def test_an_is_error_result_fails_the_node_with_the_servers_text(url: str) -> None:
    async with await _session(url) as ws:
        events, resp = await _run(ws, chain("f", [tool("f", "test.fail",
                                                       input={"message": "disk on fire"})]))
    assert resp["success"] is False
    assert resp["error"]["node_id"] == "f"
    assert resp["error"]["message"] == (
        "node 'f' failed: MCP tool test.fail failed: Error executing tool fail: disk on fire")
    assert resp["error"]["details"] == {"mcp_tool": "test.fail", "mcp_error": "is_error"}
    (failed,) = [e for e in events if e["phase"] == "error"]
    assert "disk on fire" in failed["error"]


@pytest.mark.asyncio
async def test_chain_cancel_sends_notifications_cancelled_to_the_server(url: str) -> None:
    async with await _session(url) as ws:
        await send(ws, chain("w", [tool("w", "test.wait", input={})], timeout=60))
        with anyio.fail_after(WAIT):  # the server said it is waiting
            while (event := await receive(ws))["kind"] != "progress":
                pass
        assert event["data"]["message"] == "waiting"
        await send(ws, {"type": "chain/cancel", "id": "x", "req_id": "w"})
        resp = await reply(ws)
        assert resp["type"] == "chain/resp" and resp["success"] is False, resp
        assert resp["error"]["code"] == "cancelled"
        # the server counted the cancelled call (it waits until it has)
        _, stats = await _run(ws, chain("s", [tool("s", "test.stats",
                                                   input={"cancelled": 1})]))
    assert stats["final_output"]["cancelled"] == 1, stats


@pytest.mark.asyncio
async def test_a_call_past_the_servers_timeout_fails_the_node_and_is_cancelled(url: str) -> None:
    async with await _session(url) as ws:
        _, before = await _run(ws, chain("b", [tool("b", "test.stats", input={})]))
        _, resp = await _run(ws, chain("w", [tool("w", "test.wait", input={})], timeout=60))
        assert resp["success"] is False
        assert "MCP tool test.wait did not answer within 3 s" in resp["error"]["message"]
        assert resp["error"]["details"] == {"mcp_server": "test", "mcp_error": "timeout"}
        wanted = before["final_output"]["cancelled"] + 1
        _, stats = await _run(ws, chain("s", [tool("s", "test.stats",
                                                   input={"cancelled": wanted})]))
    assert stats["final_output"]["cancelled"] == wanted, stats


@pytest.mark.asyncio
async def test_a_crashed_server_is_unavailable_then_restarted_with_its_tools(url: str) -> None:
    async with await _session(url) as ws:
        _, first = await _run(ws, chain("a", [tool("a", "flaky.stats", input={})]))
        pid = first["final_output"]["pid"]
        _, crashed = await _run(ws, chain("c", [tool("c", "flaky.crash", input={})]))
        assert crashed["success"] is False
        assert crashed["error"]["details"] == {
            "mcp_server": "flaky", "mcp_error": "mcp_server_unavailable"}, crashed["error"]
        assert crashed["error"]["retryable"] is True
        assert "MCP server 'flaky'" in crashed["error"]["message"]
        # down, restarting: "error" for the backoff's second, then "connecting"
        down = await _wait_status(ws, "flaky", "error", "connecting", error="restarted in")
        assert down["error"].startswith("MCP server 'flaky' is unavailable: ")
        assert down["error"].endswith("; it is restarted in 1.0 s"), down
        # while it is down its tools stay listed and fail at once with the reason
        _, refused = await _run(ws, chain("d", [tool("d", "flaky.stats", input={})]))
        if refused["success"] is False:  # unless the restart already won the race
            assert refused["error"]["details"]["mcp_error"] == "mcp_server_unavailable"
        up = await _wait_status(ws, "flaky", "ready")
        assert up["tools_count"] == 4 and up["error"] == ""
        _, again = await _run(ws, chain("e", [tool("e", "flaky.stats", input={})]))
    assert again["success"] is True, again
    assert again["final_output"]["pid"] != pid  # a new process


@pytest.mark.asyncio
async def test_a_hung_server_is_found_by_its_ping_and_restarted(url: str) -> None:
    async with await _session(url) as ws:
        _, first = await _run(ws, chain("a", [tool("a", "flaky.stats", input={})]))
        _, hung = await _run(ws, chain("h", [tool("h", "flaky.hang", input={})]))
        assert hung["success"] is False
        assert hung["error"]["details"]["mcp_error"] == "mcp_server_unavailable", hung["error"]
        assert "MCP server 'flaky'" in hung["error"]["message"]
        up = await _wait_status(ws, "flaky", "ready")
        assert up["error"] == ""
        _, again = await _run(ws, chain("e", [tool("e", "flaky.stats", input={})]))
    assert again["success"] is True, again
    assert again["final_output"]["pid"] != first["final_output"]["pid"]


@pytest.mark.asyncio
async def test_an_agent_registers_an_allowed_server_uses_its_tools_then_unregisters_it(
        url: str) -> None:
    async with await _session(url) as ws:
        config = {"name": "extra", "transport": "stdio", "cmd": TEST_SERVER,
                  "tool_allow_list": ["echo"], "timeout": 10}
        await send(ws, {"type": "mcp/server/register/req", "id": "r", "config": config})
        with anyio.fail_after(WAIT):
            registered = await receive(ws)
        assert_sdk_accepts(registered)
        assert registered["ok"] is True, registered
        assert (registered["server"]["name"], registered["server"]["status"],
                registered["server"]["tools_count"]) == ("extra", "ready", 1)
        _, echoed = await _run(ws, chain("e", [tool("e", "extra.echo",
                                                    input={"value": "hi"})]))
        assert echoed["final_output"] == {"value": "hi"}, echoed
        # a command the configuration does not list is refused, and nothing is spawned
        await send(ws, {"type": "mcp/server/register/req", "id": "r2", "config": {
            "name": "other", "cmd": [*TEST_SERVER, "--flag"]}})
        refused = await receive(ws)
        assert refused["ok"] is False and "register_commands" in refused["error"]
        await send(ws, {"type": "mcp/server/unregister/req", "id": "u", "server_id": "extra"})
        gone = await receive(ws)
        assert_sdk_accepts(gone)
        assert (gone["ok"], gone["server_id"]) == (True, "extra")
        _, unknown = await _run(ws, chain("f", [tool("f", "extra.echo",
                                                     input={"value": "hi"})]))
        assert unknown["error"]["code"] == "chain_invalid"
        assert [s["name"] for s in (await list_servers(ws))["servers"]] == ["flaky", "test"]


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its reaper does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


@pytest.mark.asyncio
async def test_an_unregistered_servers_leftover_children_are_killed(url: str) -> None:
    async with await _session(url) as ws:
        config = {"name": "parent", "transport": "stdio", "cmd": TEST_SERVER,
                  "tool_allow_list": ["spawn"], "timeout": 10}
        await send(ws, {"type": "mcp/server/register/req", "id": "r", "config": config})
        with anyio.fail_after(WAIT):
            registered = await receive(ws)
        assert registered["ok"] is True, registered
        _, spawned = await _run(ws, chain("s", [tool("s", "parent.spawn", input={})]))
        child = spawned["final_output"]["pid"]
        assert _alive(child)
        await send(ws, {"type": "mcp/server/unregister/req", "id": "u", "server_id": "parent"})
        assert (await receive(ws))["ok"] is True
    # the server exits at once on its closed stdin; its child is killed with its group
    with anyio.fail_after(WAIT):
        while _alive(child):  # noqa: ASYNC110 - another process's end has no event
            await anyio.sleep(0.05)


@pytest.mark.asyncio
async def test_a_server_line_over_max_message_bytes_fails_the_call_and_restarts_the_server(
        url: str) -> None:
    async with await _session(url) as ws:
        _, first = await _run(ws, chain("a", [tool("a", "flaky.stats", input={})]))
        _, big = await _run(ws, chain("b", [tool("b", "flaky.big",
                                                 input={"size": 2 * 1024 * 1024})]))
        assert big["success"] is False
        assert big["error"]["message"] == (
            "node 'b' failed: MCP server 'flaky' wrote a line longer than 1048576 bytes "
            "([limits] max_message_bytes) during the call of 'big'; it is restarted")
        assert big["error"]["details"]["mcp_error"] == "mcp_server_unavailable"
        up = await _wait_status(ws, "flaky", "ready")
        assert up["error"] == ""
        _, small = await _run(ws, chain("s", [tool("s", "flaky.big", input={"size": 1000})]))
        _, again = await _run(ws, chain("e", [tool("e", "flaky.stats", input={})]))
    assert small["final_output"] == {"result": "x" * 1000}, str(small)[:300]
    assert again["final_output"]["pid"] != first["final_output"]["pid"]


@pytest.mark.asyncio
async def test_a_stdio_server_gets_its_env_and_none_of_the_hosts_own_environment(
        url: str) -> None:
    # the host inherited this test process's environment, PYTEST_CURRENT_TEST included
    values = {}
    async with await _session(url) as ws:
        for name in ("A2E_MCP_TEST", "PYTEST_CURRENT_TEST", "HOME"):
            _, resp = await _run(ws, chain("g", [tool("g", "test.getenv", input={"name": name})]))
            values[name] = resp["final_output"]["value"]
    assert values == {"A2E_MCP_TEST": "given", "PYTEST_CURRENT_TEST": None,
                      "HOME": os.environ["HOME"]}


@pytest.mark.asyncio
async def test_a_registered_server_may_not_take_a_tool_pack_or_configured_servers_name(
        url: str) -> None:
    async with await _session(url) as ws:
        answers = []
        for i, name in enumerate(("text", "conformance", "test")):
            await send(ws, {"type": "mcp/server/register/req", "id": f"r{i}", "config": {
                "name": name, "transport": "stdio", "cmd": TEST_SERVER}})
            with anyio.fail_after(WAIT):
                answers.append(await receive(ws))
        assert [a["ok"] for a in answers] == [False, False, False], answers
        assert "is the name of a tool pack" in answers[0]["error"], answers[0]
        assert "is the name of a tool pack" in answers[1]["error"], answers[1]
        assert "exists already" in answers[2]["error"], answers[2]
        assert [s["name"] for s in (await list_servers(ws))["servers"]] == ["flaky", "test"]


@pytest.mark.asyncio
async def test_only_the_registering_session_unregisters_and_its_close_drops_the_server(
        url: str) -> None:
    async with await _session(url) as other:
        async with await _session(url) as owner:
            await send(owner, {"type": "mcp/server/register/req", "id": "r", "config": {
                "name": "owned", "transport": "stdio", "cmd": TEST_SERVER,
                "tool_allow_list": ["echo"], "timeout": 10}})
            with anyio.fail_after(WAIT):
                registered = await receive(owner)
            assert registered["ok"] is True, registered
            await send(other, {"type": "mcp/server/unregister/req", "id": "u",
                               "server_id": "owned"})
            refused = await receive(other)
            assert (refused["ok"], refused["server_id"]) == (False, "owned")
            listed = [s["name"] for s in (await list_servers(other))["servers"]]
            assert listed == ["flaky", "owned", "test"]
        # the owner's connection closed: its registration goes with it
        with anyio.fail_after(WAIT):
            while "owned" in [s["name"] for s in (await list_servers(other))["servers"]]:  # noqa: ASYNC110 - polled over the wire
                await anyio.sleep(0.05)
