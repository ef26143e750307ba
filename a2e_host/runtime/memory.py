"""A client that speaks messages to an in-process host, over the in-memory transport.

Layer: runtime. For ``a2e-host run``, tests and embedding: the frames take the host's
whole path (:meth:`Host.serve_connection <a2e_host.runtime.host.Host.serve_connection>`:
decode, session checks, routing, error mapping), exactly as over stdio or WebSocket. The
transport (:mod:`a2e_host.transports.memory`) carries bytes only; this module encodes
what the client sends and decodes what it receives with the host's own codec (core
messages and every plugin's)::

    async with open_memory_client(host) as client:
        client.send(HandshakeRequest(agent_caps=["chains"]))
        resp = await client.receive()
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from ..codec import MessageCodec, encode_message
from ..messages import Message
from ..transports.memory import MemoryClient, open_memory_connection
from .host import Host

__all__ = ["MessageClient", "open_memory_client"]


class MessageClient:
    """The agent's side of an in-memory connection, in messages.

    Args:
        frames: the transport's bytes-level client.
        codec: decodes what the host sends (the host's codec).
    """

    def __init__(self, frames: MemoryClient, codec: MessageCodec) -> None:
        self.frames = frames
        self.codec = codec

    def send(self, message: Message | bytes | str) -> None:
        """Send one message (a Struct, or raw JSON text as bytes / str) without waiting.

        Raises:
            anyio.BrokenResourceError: the host closed the connection.
        """
        if isinstance(message, Message):  # a request's secrets are meant for the host
            self.frames.send(encode_message(message, redact=False))
        else:
            self.frames.send(message)

    def send_eof(self) -> None:
        """End of input: the host finishes work in flight, flushes, then closes."""
        self.frames.send_eof()

    async def receive_bytes(self) -> bytes:
        """The next frame from the host, undecoded.

        Raises:
            anyio.EndOfStream: the host closed the connection.
        """
        return await self.frames.receive()

    async def receive(self) -> Message:
        """The next message from the host, decoded with the host's codec.

        Raises:
            anyio.EndOfStream: the host closed the connection.
        """
        return self.codec.decode(await self.frames.receive())

    @property
    def close_code(self) -> int | None:
        """The code the host closed with (1000, 1001, 1008 …), None while open."""
        return self.frames.close_code

    async def aclose(self) -> None:
        """Go away: the host cancels this connection's work. Idempotent."""
        await self.frames.aclose()


@asynccontextmanager
async def open_memory_client(
    host: Host, *, bearer_token: str = "", buffer_frames: int = 64, peer: str = "memory"
) -> AsyncIterator[MessageClient]:
    """Connect an in-process client to ``host``.

    Args:
        host: the host to serve the connection.
        bearer_token: as if sent in an ``Authorization: Bearer`` header.
        buffer_frames: host → client frames buffered before the host's writer waits.
        peer: the peer key the host accounts the connection under.

    Yields:
        The :class:`MessageClient`. On exit it is closed (work still running is
        cancelled) and the connection has fully ended. The host runs
        (:meth:`Host.running <a2e_host.runtime.host.Host.running>`) while it is open.
    """
    async with host.running(), open_memory_connection(
        host.serve_connection, bearer_token=bearer_token, buffer_frames=buffer_frames,
        peer=peer,
    ) as frames:
        yield MessageClient(frames, host.codec)
