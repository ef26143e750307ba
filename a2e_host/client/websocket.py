"""The client over WebSocket: :func:`connect_ws` (PROTOCOL.md §1, subprotocol ``a2e.v1``).

Layer: client (anyio, websockets; websockets is imported when a connection is opened).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio

from ..codec import encode_message
from ..messages import Message
from .codec import client_codec
from .session import DEFAULT_AGENT_CAPS, Client, open_client

__all__ = ["connect_ws"]


class _WebSocketStream:
    """One JSON message per text frame (PROTOCOL.md §1)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def send(self, message: Message) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            await self.ws.send(encode_message(message, redact=False).decode("utf-8"))
        except ConnectionClosed as exc:
            raise anyio.BrokenResourceError(str(exc)) from exc

    async def receive(self) -> Message:
        from websockets.exceptions import ConnectionClosed

        try:
            frame = await self.ws.recv()
        except ConnectionClosed as exc:
            raise anyio.EndOfStream from exc
        return client_codec.decode(frame)

    async def aclose(self) -> None:
        await self.ws.close()


@asynccontextmanager
async def connect_ws(
    url: str,
    *,
    agent_caps: Sequence[str] = DEFAULT_AGENT_CAPS,
    auth_token: str = "",
    limits: dict[str, int] | None = None,
    agent_id: str = "a2e-host-client",
    open_timeout: float = 10.0,
    max_message_bytes: int | None = 64 * 1024 * 1024,
) -> AsyncIterator[Client]:
    """Connect to a host over WebSocket (PROTOCOL.md §1) and handshake.

    Args:
        url: e.g. ``ws://127.0.0.1:8765``.
        agent_caps / auth_token / limits / agent_id: see :func:`open_client`. The token is
            also sent as ``Authorization: Bearer``.
        open_timeout: seconds for the TCP + WebSocket opening handshake, and the A2E one.
        max_message_bytes: largest incoming frame accepted, bytes; None = no limit.

    Raises:
        OSError: the host cannot be reached.
        HandshakeFailed / HostError / TimeoutError: see :func:`open_client`.
    """
    from websockets.asyncio.client import connect

    headers = {"Authorization": f"Bearer {auth_token}"} if auth_token else None
    async with connect(
        url,
        subprotocols=["a2e.v1"],  # type: ignore[list-item]
        additional_headers=headers,
        open_timeout=open_timeout,
        max_size=max_message_bytes,
    ) as ws:
        async with open_client(
            _WebSocketStream(ws),
            agent_caps=agent_caps,
            auth_token=auth_token,
            limits=limits,
            agent_id=agent_id,
            handshake_timeout=open_timeout,
        ) as client:
            client.url = url
            yield client
