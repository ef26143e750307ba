"""Every ``skill/*`` frame the real host writes, as bytes off the wire (not re-encoded by
the client library), decodes with the public SDK's models (issue 15): ``skill/discover/resp``,
``skill/event`` and ``skill/call/resp`` for a success, a deprecated version's warning, a
skill that runs and fails, and a retired version refused; over the real stdio CLI and a
real WebSocket server on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from tests.support.process import CLI
from tests.support.sdk import assert_sdk_accepts
from tests.support.skills import write_versioned_skills
from tests.support.stdio import handshake, stdio_process
from tests.support.ws import receive, serving_argv

Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


@asynccontextmanager
async def raw_wire(transport: str, skills: Path) -> AsyncIterator[tuple[Send, Receive]]:
    flags = ["--tools", "conformance", "--skills", str(skills)]
    if transport == "stdio":
        async with stdio_process([*CLI, "stdio", *flags]) as host:
            await handshake(host, ["skill"])
            yield host.send, host.receive
        return
    async with serving_argv(CLI, "--port", "0", *flags) as (url, _), connect(url) as ws:
        await ws.send(json.dumps({"type": "handshake/req", "id": "h", "agent_caps": ["skill"]}))
        assert (await receive(ws))["ok"]

        async def send(message: dict[str, Any]) -> None:
            await ws.send(json.dumps(message))

        yield send, lambda: receive(ws)


async def until_reply(receive_one: Receive, req_id: str) -> tuple[list[dict[str, Any]],
                                                                  dict[str, Any]]:
    """The ``skill/event`` frames of ``req_id`` and the frame that ends it, each checked
    against the SDK's model as it arrives."""
    events = []
    while True:
        frame = await receive_one()
        assert frame.get("req_id") == req_id, frame
        assert_sdk_accepts(frame)
        if frame["type"] != "skill/event":
            return events, frame
        events.append(frame)


@pytest.mark.asyncio
@pytest.mark.parametrize("transport", ["stdio", "ws"])
async def test_every_raw_skill_frame_decodes_with_the_sdk_models(
        transport: str, tmp_path: Path) -> None:
    skills = write_versioned_skills(tmp_path / "skills")
    async with raw_wire(transport, skills) as (send, receive_one):
        await send({"type": "skill/discover/req", "id": "d", "filter_tags": ["text"]})
        events, found = await until_reply(receive_one, "d")
        assert events == []
        assert found["type"] == "skill/discover/resp"
        assert [(s["name"], s["version"], s["status"], s["lifecycle"])
                for s in found["skills"]] == [("shout", "1", "Published", "deprecated"),
                                              ("shout", "2", "Published", "active"),
                                              ("shout", "10", "Created", "draft")]
        replies = {}
        for req_id, name, arguments in (("ok", "shout@2", {"parts": ["a", "b"]}),
                                        ("old", "shout@1", {"parts": ["a"]}),
                                        ("bad", "shout", {"parts": "not a list"}),
                                        ("gone", "gone@1", {})):
            await send({"type": "skill/call/req", "id": req_id, "name": name,
                        "arguments": arguments, "streaming": True})
            replies[req_id] = await until_reply(receive_one, req_id)
    ok_events, ok = replies["ok"]
    assert (len(ok_events), ok["type"], ok["data"]["success"], ok["data"]["data"]) == (
        7, "skill/call/resp", True, {"v": 2, "text": "AB"})
    old_events, old = replies["old"]
    assert old_events[0]["data"]["warning"] == "skill 'shout@1' is deprecated; use 'shout@2'"
    assert old["data"]["data"] == {"text": "A"}
    _, bad = replies["bad"]
    assert (bad["error"], bad["data"]["success"], bad["data"]["error_code"]) == (
        None, False, "skill_error")
    gone_events, gone = replies["gone"]
    assert (gone_events, gone["data"], gone["error"]["code"]) == ([], None, "unknown_skill")
