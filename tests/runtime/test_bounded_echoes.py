"""A refusal repeats a bounded part of the field it refuses: a megabyte ``session_id`` or
``type`` is answered in a few hundred bytes, not twice its size (a client that enforces
the host's ``max_message_bytes`` would otherwise drop the connection instead of reading
the error)."""

from __future__ import annotations

import json

import pytest
from websockets.asyncio.client import connect

from tests.support.ws import hello, receive, serving

MIB = 1024 * 1024


@pytest.mark.asyncio
async def test_a_megabyte_session_id_or_type_is_refused_in_a_bounded_answer() -> None:
    async with serving() as (url, _host):
        async with connect(url, subprotocols=["a2e.v1"], max_size=None) as ws:  # type: ignore[list-item]
            await hello(ws)
            await ws.send(json.dumps({
                "type": "chain/req", "id": "c1", "session_id": "s" * MIB,
                "nodes": [{"node_id": "a", "kind": "tool", "name": "echo"}],
                "entry_node": "a"}))
            raw = await ws.recv()
            error = json.loads(raw)
            assert (error["type"], error["code"], error["req_id"]) == (
                "error", "unknown_session", "c1")
            assert "(1,048,576 characters) is not this connection's session" in error["message"]
            assert error["detail"] == {"session_id": "s" * 256}
            assert len(raw) < 2048

            await ws.send(json.dumps({"type": "t" * MIB, "id": "u1"}))
            raw = await ws.recv()
            error = json.loads(raw)
            assert (error["code"], error["req_id"]) == ("unknown_type", "u1")
            assert "(1,048,576 characters); an agent may send" in error["message"]
            assert error["detail"]["type"] == "t" * 256
            assert len(raw) < 4096
            # the session goes on
            await ws.send(json.dumps({"type": "ping", "id": "p"}))
            assert (await receive(ws))["type"] == "pong"
