"""MCP servers as tool sources (issue 20, PROTOCOL.md §12) with a real, unmodified MCP
server from PyPI: ``mcp-server-time``, configured in ``[mcp.servers.time]`` of a real
``a2e-host serve``; its tools listed over ``tool/list`` as ``time.TOOL`` and called inside
a map whose results feed a downstream node.

Inputs are chosen so the outputs are exact whatever the day: UTC, Asia/Tokyo and
Asia/Kolkata have no daylight saving time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from websockets.asyncio.client import connect

from tests.support.mcp_hosts import TIME_SERVER, hello_mcp, list_servers, serving_mcp_host, toml_of
from tests.support.requests import chain, tool
from tests.support.sdk import assert_sdk_accepts, assert_sdk_model_accepts
from tests.support.ws import reply, send

SUBPROTOCOL = "a2e.v1"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One host for the module: the text pack and the time server (convert_time only)."""
    text = toml_of(["text"], {"start_timeout": 20}, {
        "time": {"command": TIME_SERVER, "tool_allow_list": ["convert_time"], "timeout": 20},
    })
    with serving_mcp_host(tmp_path_factory.mktemp("mcp-time"), text) as served:
        yield served


async def _call(url: str, message: dict[str, Any]) -> dict[str, Any]:
    async with connect(url, subprotocols=[SUBPROTOCOL]) as ws:  # type: ignore[list-item]
        await hello_mcp(ws)
        await send(ws, message)
        return await reply(ws)


@pytest.mark.asyncio
async def test_time_server_tools_are_listed_over_tool_list_as_server_dot_tool(url: str) -> None:
    resp = await _call(url, {"type": "tool/list/req", "id": "t", "filter_tags": ["mcp"]})
    assert_sdk_accepts(resp)
    assert [t["name"] for t in resp["tools"]] == ["time.convert_time"]  # the allow list
    (convert,) = resp["tools"]
    schema = convert["input_schema"]
    assert sorted(schema["required"]) == ["source_timezone", "target_timezone", "time"]
    assert schema["properties"]["time"]["type"] == "string"
    assert sorted(convert["output_schema"]["properties"]) == [
        "source", "target", "time_difference"]
    assert [p["name"] for p in convert["input_parameters"]] == [
        "source_timezone", "time", "target_timezone"]
    assert (convert["side_effects"], convert["toolkit"]) == ("read", "mcp:time")
    assert convert["description"] == "Convert time between timezones"


@pytest.mark.asyncio
async def test_a_chain_maps_convert_time_over_zones_and_feeds_a_downstream_node(
        url: str) -> None:
    nodes = [
        {"node_id": "zones", "kind": "map", "items_path": "input.zones", "map_node": "conv",
         "next_node": "summary"},
        tool("conv", "time.convert_time",
             input={"source_timezone": "UTC", "time": "12:00"},
             input_map={"target_timezone": "item"}),
        tool("summary", "template", input={"template": "$diffs at $times"},
             input_map={"values": "{diffs: join(',', zones.output[*].time_difference), "
                                  "times: join(',', zones.output[*].target.datetime)}"}),
    ]
    request = chain("c", nodes, initial_input={"zones": ["Asia/Tokyo", "Asia/Kolkata", "UTC"]})
    resp = await _call(url, request)
    assert resp["success"] is True, resp
    converted = resp["outputs"]["zones"]
    assert [c["time_difference"] for c in converted] == ["+9.0h", "+5.5h", "+0.0h"]
    assert [c["target"]["timezone"] for c in converted] == ["Asia/Tokyo", "Asia/Kolkata", "UTC"]
    day = converted[0]["source"]["datetime"][:10]  # the server's today, in UTC
    assert [c["target"]["datetime"] for c in converted] == [
        f"{day}T21:00:00+09:00", f"{day}T17:30:00+05:30", f"{day}T12:00:00+00:00"]
    assert all(c["source"]["datetime"] == f"{day}T12:00:00+00:00" for c in converted)
    assert resp["final_output"] == {"text": (
        f"+9.0h,+5.5h,+0.0h at {day}T21:00:00+09:00,{day}T17:30:00+05:30,"
        f"{day}T12:00:00+00:00")}


@pytest.mark.asyncio
async def test_an_unknown_mcp_tool_is_refused_before_anything_runs_with_the_close_name(
        url: str) -> None:
    resp = await _call(url, chain("u", [tool("t", "time.convert_tim", input={})]))
    assert resp["success"] is False
    assert resp["error"]["code"] == "chain_invalid"
    assert "did you mean 'time.convert_time'" in resp["error"]["message"], resp["error"]


@pytest.mark.asyncio
async def test_mcp_server_list_shows_the_time_server_ready_in_the_sdks_shape(url: str) -> None:
    async with connect(url, subprotocols=[SUBPROTOCOL]) as ws:  # type: ignore[list-item]
        hello = await hello_mcp(ws)
        caps = {c["capability"]: c for c in hello["accepted_caps"]}
        assert caps["mcp"]["metadata"]["servers"] == ["time"]
        assert caps["mcp"]["metadata"]["register"] is False
        resp = await list_servers(ws)
    assert_sdk_accepts(resp)
    (server,) = resp["servers"]
    assert_sdk_model_accepts("MCPServerInfo", server)
    assert {k: server[k] for k in ("server_id", "name", "transport", "status", "tools_count",
                                   "server_name", "error")} == {
        "server_id": "time", "name": "time", "transport": "stdio", "status": "ready",
        "tools_count": 1, "server_name": "mcp-time", "error": ""}
    assert server["mcp_version"] and server["connected_at"] > 0


@pytest.mark.asyncio
async def test_agents_cannot_register_a_server_unless_the_configuration_allows_commands(
        url: str) -> None:
    config = {"name": "evil", "transport": "stdio", "cmd": ["sh", "-c", "touch /tmp/x"]}
    resp = await _call(url, {"type": "mcp/server/register/req", "id": "r", "config": config})
    assert_sdk_accepts(resp)
    assert resp["ok"] is False and resp["req_id"] == "r"
    assert "register_commands" in resp["error"]
    resp = await _call(url, {"type": "mcp/server/unregister/req", "id": "u", "server_id": "time"})
    assert_sdk_accepts(resp)
    assert (resp["ok"], resp["server_id"]) == (False, "time")  # a configured server stays


@pytest.mark.asyncio
async def test_tool_call_calls_an_mcp_tool_directly_and_its_server_refuses_missing_input(
        url: str) -> None:
    resp = await _call(url, {"type": "tool/call/req", "id": "c", "tool_name": "time.convert_time",
                             "arguments": {"source_timezone": "UTC", "time": "12:00",
                                           "target_timezone": "Asia/Tokyo"}})
    assert_sdk_accepts(resp)
    assert resp["type"] == "tool/call/resp" and resp["data"]["success"] is True, resp
    output = resp["data"]["data"]
    assert (output["time_difference"], output["target"]["timezone"]) == ("+9.0h", "Asia/Tokyo")
    assert output["target"]["datetime"].endswith("T21:00:00+09:00")
    missing = await _call(url, {"type": "tool/call/req", "id": "m",
                                "tool_name": "time.convert_time", "arguments": {"time": "12:00"}})
    assert missing["data"]["success"] is False, missing
    # the server checks its own input (its inputSchema only describes it to the host)
    assert missing["data"]["error_code"] == "tool_error", missing
    assert missing["data"]["error"].startswith("MCP tool time.convert_time failed: ")
    assert "source_timezone" in missing["data"]["error"], missing
