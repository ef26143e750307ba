"""In-process transport: an agent and the host in one event loop.

Layer: transports. For ``a2e-host run``, benchmarks and tests. Frames go through
:meth:`Host.serve_connection <a2e_host.host.Host.serve_connection>` exactly as they do
for stdio and WebSocket (decode, session checks, routing, error mapping), only without
a socket or a pipe::

    async with open_memory_connection(host) as client:
        client.send(HandshakeRequest(agent_caps=["chains"]))
        resp = await client.receive()

:meth:`MemoryClient.aclose` is the peer going away (its work is cancelled);
:meth:`MemoryClient.send_eof` is the end of input (work finishes, like stdin EOF).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..chains.messages import chain_codec
from ..codec import encode_message
from ..messages import Message
from . import CloseCode, Incoming

if TYPE_CHECKING:
    from ..host import Host

__all__ = ["open_memory_connection", "MemoryClient", "MemoryTransport"]


class _Eof:
    """End-of-input marker on the client → host stream."""


_EOF = _Eof()


class MemoryTransport:
    """The host's side of an in-memory connection (implements
    :class:`~a2e_host.transports.Transport`)."""

    kind = "memory"

    def __init__(
        self,
        incoming: MemoryObjectReceiveStream[bytes | str | _Eof],
        outgoing: MemoryObjectSendStream[bytes],
        *,
        bearer_token: str = "",
        peer: str = "memory",
    ) -> None:
        self.bearer_token = bearer_token
        self.peer = peer
        self.close_code: int | None = None
        self.close_reason = ""
        self._incoming = incoming
        self._outgoing = outgoing
        self._gone = anyio.Event()

    async def receive(self) -> Incoming:
        try:
            item = await self._incoming.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise anyio.BrokenResourceError from None
        if isinstance(item, _Eof):
            raise anyio.EndOfStream
        return item

    async def send_frames(self, frames: Sequence[bytes]) -> None:
        try:
            for frame in frames:
                await self._outgoing.send(frame)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise anyio.BrokenResourceError from None

    async def wait_peer_gone(self) -> None:
        await self._gone.wait()

    def peer_gone(self) -> None:
        self._gone.set()

    async def aclose(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        if self.close_code is None:
            self.close_code = code
            self.close_reason = reason
        await self._outgoing.aclose()
        await self._incoming.aclose()


class MemoryClient:
    """The agent's side of an in-memory connection."""

    def __init__(
        self,
        to_host: MemoryObjectSendStream[bytes | str | _Eof],
        from_host: MemoryObjectReceiveStream[bytes],
        transport: MemoryTransport,
    ) -> None:
        self._to_host = to_host
        self._from_host = from_host
        self._transport = transport

    def send(self, message: Message | bytes | str) -> None:
        """Send one message (a Struct, or raw JSON text as bytes / str) without waiting.

        Raises:
            anyio.BrokenResourceError: the host closed the connection.
        """
        data = encode_message(message) if isinstance(message, Message) else message
        try:
            self._to_host.send_nowait(data)
        except anyio.ClosedResourceError:
            raise anyio.BrokenResourceError from None

    def send_eof(self) -> None:
        """End of input: the host finishes work in flight, flushes, then closes."""
        try:
            self._to_host.send_nowait(_EOF)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    async def receive_bytes(self) -> bytes:
        """The next frame from the host, undecoded.

        Raises:
            anyio.EndOfStream: the host closed the connection.
        """
        try:
            return await self._from_host.receive()
        except anyio.ClosedResourceError:
            raise anyio.EndOfStream from None

    async def receive(self) -> Message:
        """The next message from the host, decoded (:data:`~a2e_host.chains.messages.chain_codec`).

        Raises:
            anyio.EndOfStream: the host closed the connection.
        """
        return chain_codec.decode(await self.receive_bytes())

    @property
    def close_code(self) -> int | None:
        """The code the host closed with (1000, 1001, 1008 …), None while open."""
        return self._transport.close_code

    async def aclose(self) -> None:
        """Go away: the host cancels this connection's work. Idempotent."""
        self._transport.peer_gone()
        await self._to_host.aclose()
        await self._from_host.aclose()


@asynccontextmanager
async def open_memory_connection(
    host: Host, *, bearer_token: str = "", buffer_frames: int = 64, peer: str = "memory"
) -> AsyncIterator[MemoryClient]:
    """Connect an in-process client to ``host``.

    Args:
        host: the host to serve the connection.
        bearer_token: as if sent in an ``Authorization: Bearer`` header.
        peer: the peer key the host accounts the connection under (tests pass
            addresses such as ``"203.0.113.7"`` to act as distinct remote peers).
        buffer_frames: host → client frames buffered before the host's writer waits
            (then the host's outbox fills, and chains wait at its high-water mark).

    Yields:
        The :class:`MemoryClient`. On exit it is closed (work still running is
        cancelled) and the connection has fully ended.
    """
    to_host_send, to_host_recv = anyio.create_memory_object_stream[bytes | str | _Eof](math.inf)
    from_host_send, from_host_recv = anyio.create_memory_object_stream[bytes](buffer_frames)
    transport = MemoryTransport(
        to_host_recv, from_host_send, bearer_token=bearer_token, peer=peer
    )
    client = MemoryClient(to_host_send, from_host_recv, transport)
    async with anyio.create_task_group() as tg:
        tg.start_soon(host.serve_connection, transport)
        try:
            yield client
        finally:
            await client.aclose()
