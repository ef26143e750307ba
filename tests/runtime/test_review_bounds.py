"""Bounds on what a peer can make the host hold or do: a message before the handshake is
small, and replies to a peer that writes but never reads stop the reading."""

from __future__ import annotations

import anyio
import pytest

from a2e_host.config import HostConfig
from a2e_host.messages import ErrorMessage, Ping, Pong
from a2e_host.runtime.connection import PRE_HANDSHAKE_MAX_MESSAGE_BYTES
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import open_memory_client
from a2e_host.runtime.outbox import Outbox
from tests.support.memory import handshaken

WAIT = 10


def big_ping(req_id: str) -> Ping:
    return Ping(id=req_id + "x" * (PRE_HANDSHAKE_MAX_MESSAGE_BYTES + 10))


@pytest.mark.asyncio
async def test_a_message_before_the_handshake_is_held_to_the_smaller_limit() -> None:
    host = Host(HostConfig())
    with anyio.fail_after(WAIT):
        async with host.running(), open_memory_client(host) as client:
            client.send(big_ping("early"))
            refused = await client.receive()
            await handshaken(client)
            client.send(big_ping("late"))
            answered = await client.receive()
    assert isinstance(refused, ErrorMessage) and refused.code == "message_too_large"
    assert "over the limit before a handshake (1048576)" in refused.message
    assert refused.detail["limit"] == PRE_HANDSHAKE_MAX_MESSAGE_BYTES
    assert isinstance(answered, Pong) and answered.req_id.startswith("late")


def test_an_outbox_is_flooded_only_past_four_times_its_mark() -> None:
    outbox = Outbox(high_water=2, high_water_bytes=1 << 20)
    for n in range(8):
        outbox.send_frame_nowait(b"{}")
        assert outbox.full == (n + 1 > 2)
        assert outbox.flooded is False
    outbox.send_frame_nowait(b"{}")
    assert outbox.flooded is True
