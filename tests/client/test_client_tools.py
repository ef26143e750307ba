"""The client's ``list_tools()`` / ``call_tool()`` against the real CLI over stdio and a
real WebSocket server (PROTOCOL.md §11)."""

from __future__ import annotations

import sys

import pytest

from a2e_host.client import HostError, serve_ws, spawn_stdio
from a2e_host.client.tools import ToolCall
from a2e_host.tools.messages import ToolCallResponse, ToolEvent
from tests.support.process import STARTUP

STDIO = (sys.executable, "-m", "a2e_host", "stdio", "--tools", "conformance")


async def check(client: object) -> None:
    listed = await client.list_tools(query="progress")  # type: ignore[attr-defined]
    assert [t.name for t in listed] == ["progress"]
    assert listed[0].input_schema["required"] == ["steps"]
    call: ToolCall = client.call_tool("progress", {"steps": 4})  # type: ignore[attr-defined]
    messages = [m async for m in call]
    assert [type(m) for m in messages] == [ToolEvent] * 4 + [ToolCallResponse]
    assert [(e.seq, e.data["pct"]) for e in call.events] == [(1, 25), (2, 50), (3, 75),
                                                             (4, 100)]
    result = messages[-1].data  # type: ignore[union-attr]
    assert (result.success, result.data) == (True, {"steps": 4, "reported": 4})
    quiet = client.call_tool("progress", {"steps": 2}, streaming=False)  # type: ignore[attr-defined]
    assert (await quiet.result()).data == {"steps": 2, "reported": 2}
    assert [e.seq for e in quiet.events] == [1, 2]
    with pytest.raises(HostError) as refused:
        await client.call_tool("nope", {}).result()  # type: ignore[attr-defined]
    assert refused.value.code == "unknown_tool"


@pytest.mark.asyncio
async def test_the_client_lists_and_calls_tools_over_stdio() -> None:
    async with spawn_stdio(STDIO, stderr="capture", handshake_timeout=STARTUP) as client:
        assert "tools" in client.accepted_caps
        await check(client)


@pytest.mark.asyncio
async def test_the_client_lists_and_calls_tools_over_websocket() -> None:
    async with serve_ws(["--tools", "conformance"]) as client:
        assert "tools" in client.accepted_caps
        await check(client)
