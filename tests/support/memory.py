"""Sessions on an in-process host (``a2e_host.runtime.memory.open_memory_client``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from a2e_host.messages import HandshakeRequest, HandshakeResponse


async def handshaken(client: Any, caps: Sequence[str] = ("chains",)) -> str:
    """Handshake ``client`` asking for ``caps``; assert it succeeded; its session id."""
    client.send(HandshakeRequest(agent_caps=list(caps)))
    resp = await client.receive()
    assert isinstance(resp, HandshakeResponse) and resp.ok, resp
    return resp.session_id
