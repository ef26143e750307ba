"""Raw ``tool/*`` frames for the real hosts (stdio and WebSocket), and a reader that
keeps one call's ``tool/event`` frames apart from its response (PROTOCOL.md §11)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

TOOL_CAPS = ("chains", "tools")


def list_req(req_id: str, **fields: Any) -> dict[str, Any]:
    """A ``tool/list/req`` with ``fields``."""
    return {"type": "tool/list/req", "id": req_id, **fields}


def call_req(req_id: str, tool: str, arguments: dict[str, Any], **fields: Any) -> dict[str, Any]:
    """A ``tool/call/req`` of ``tool`` with ``arguments`` and ``fields``."""
    return {"type": "tool/call/req", "id": req_id, "tool_name": tool, "arguments": arguments,
            **fields}


async def call_events(
    receive: Callable[[], Awaitable[dict[str, Any]]], req_id: str
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Read one call's ``tool/event`` frames and the message that ends it (its
    ``tool/call/resp`` or an ``error``); every frame read must carry ``req_id``."""
    events = []
    while True:
        got = await receive()
        assert got.get("req_id") == req_id, f"a frame of another request: {got}"
        if got["type"] != "tool/event":
            return events, got
        events.append(got)
