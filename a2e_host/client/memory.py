"""The client of an in-process host: :func:`connect_memory`.

Layer: client. The one module of the client that uses the in-memory transport, through
the host's message-level client over it (:mod:`a2e_host.runtime.memory`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio

from ..messages import Message
from .codec import client_codec
from .errors import unwrap_group
from .session import DEFAULT_AGENT_CAPS, Client, open_client

__all__ = ["connect_memory"]


class _MemoryStream:
    """Adapter over :func:`a2e_host.runtime.memory.open_memory_client`'s client."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def send(self, message: Message) -> None:
        result = self.conn.send(message)
        if hasattr(result, "__await__"):
            await result

    async def receive(self) -> Message:
        received = await self.conn.receive()
        if isinstance(received, bytes | str):
            return client_codec.decode(received)
        if received is None:
            raise anyio.EndOfStream
        return received  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        closer = getattr(self.conn, "aclose", None)
        if closer is not None:
            await closer()


@asynccontextmanager
async def connect_memory(
    host: Any,
    *,
    agent_caps: Sequence[str] = DEFAULT_AGENT_CAPS,
    auth_token: str = "",
    limits: dict[str, int] | None = None,
    agent_id: str = "a2e-host-client",
    handshake_timeout: float = 10.0,
) -> AsyncIterator[Client]:
    """Connect to an in-process :class:`~a2e_host.runtime.host.Host` over the memory transport.

    The messages take the host's whole path (dispatch, plugin, validation, scheduler), as
    over a wire. Arguments and errors: see :func:`open_client`.
    """
    from ..runtime.memory import open_memory_client

    with unwrap_group():
        async with open_memory_client(host) as conn:
            async with open_client(
                _MemoryStream(conn),
                agent_caps=agent_caps,
                auth_token=auth_token,
                limits=limits,
                agent_id=agent_id,
                handshake_timeout=handshake_timeout,
            ) as client:
                yield client
