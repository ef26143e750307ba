"""In-process transport: an agent and a connection handler in one event loop, bytes only.

Layer: transports. No protocol knowledge: frames are JSON text as bytes (or ``str``) in
both directions, exactly what stdio and WebSocket carry, only without a socket or a pipe.
The handler is any ``Callable[[Transport], Awaitable[None]]`` (a host's
``serve_connection``)::

    async with open_memory_connection(host.serve_connection) as client:
        client.send(b'{"type": "handshake/req", "id": "h", "agent_caps": ["chains"]}')
        frame = await client.receive()

A client that speaks messages (Structs) instead of bytes is
:func:`a2e_host.runtime.memory.open_memory_client`.

:meth:`MemoryClient.aclose` is the peer going away (its work is cancelled);
:meth:`MemoryClient.send_eof` is the end of input (work finishes, like stdin EOF).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from . import CloseCode, ConnectionHandler, Incoming

__all__ = ["open_memory_connection", "MemoryClient", "MemoryTransport"]


class _Eof:
    """End-of-input marker on the client → host stream."""


_EOF = _Eof()


class _Frames:
    """The host → client direction: frames in order, at most ``capacity`` of them
    buffered (the host's writer waits beyond that). Queuing a frame the buffer has
    room for is a deque append; an event is made only when a side has to wait."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("buffer_frames must be >= 1")
        self.capacity = capacity
        self._frames: deque[bytes] = deque()
        self._writer_closed = False  # the host closed: the client reads what is left
        self._reader_closed = False  # the client left: the host's sends fail
        self._readable: anyio.Event | None = None
        self._writable: anyio.Event | None = None

    async def put_all(self, frames: Sequence[bytes]) -> None:
        queued = self._frames
        start = 0
        while start < len(frames):
            if self._reader_closed or self._writer_closed:
                raise anyio.BrokenResourceError
            room = self.capacity - len(queued)
            if room <= 0:
                self._wake_reader()
                if self._writable is None:
                    self._writable = anyio.Event()
                await self._writable.wait()
                continue
            queued.extend(frames[start:start + room])
            start += room
        self._wake_reader()

    async def get_some(self) -> list[bytes]:
        while not self._frames:
            if self._writer_closed or self._reader_closed:
                raise anyio.EndOfStream
            if self._readable is None:
                self._readable = anyio.Event()
            await self._readable.wait()
        frames = list(self._frames)
        self._frames.clear()
        self._wake_writer()
        return frames

    async def get(self) -> bytes:
        while not self._frames:
            if self._writer_closed or self._reader_closed:
                raise anyio.EndOfStream
            if self._readable is None:
                self._readable = anyio.Event()
            await self._readable.wait()
        frame = self._frames.popleft()
        self._wake_writer()
        return frame

    def _wake_writer(self) -> None:
        writable = self._writable
        if writable is not None:
            self._writable = None
            writable.set()

    def close_writer(self) -> None:
        self._writer_closed = True
        self._wake_reader()

    def close_reader(self) -> None:
        self._reader_closed = True
        self._frames.clear()
        self._wake_reader()
        self._wake_writer()

    def _wake_reader(self) -> None:
        readable = self._readable
        if readable is not None:
            self._readable = None
            readable.set()


class MemoryTransport:
    """The host's side of an in-memory connection (implements
    :class:`~a2e_host.transports.Transport`)."""

    kind = "memory"

    def __init__(
        self,
        incoming: MemoryObjectReceiveStream[bytes | str | _Eof],
        outgoing: _Frames,
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
        """Hand the frames to the client, waiting only while its buffer is full (no
        checkpoint per frame: a batch of a thousand events costs no thousand turns of
        the event loop).

        Raises:
            anyio.BrokenResourceError: the client is gone (or the connection closed).
        """
        await self._outgoing.put_all(frames)

    async def wait_peer_gone(self) -> None:
        await self._gone.wait()

    def peer_gone(self) -> None:
        self._gone.set()

    async def aclose(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        if self.close_code is None:
            self.close_code = code
            self.close_reason = reason
        self._outgoing.close_writer()
        await self._incoming.aclose()


class MemoryClient:
    """The agent's side of an in-memory connection: frames as bytes."""

    def __init__(
        self,
        to_host: MemoryObjectSendStream[bytes | str | _Eof],
        from_host: _Frames,
        transport: MemoryTransport,
    ) -> None:
        self._to_host = to_host
        self._from_host = from_host
        self._transport = transport

    def send(self, frame: bytes | str) -> None:
        """Send one frame (one JSON message as text) without waiting.

        Raises:
            anyio.BrokenResourceError: the host closed the connection.
        """
        try:
            self._to_host.send_nowait(frame)
        except anyio.ClosedResourceError:
            raise anyio.BrokenResourceError from None

    def send_eof(self) -> None:
        """End of input: the host finishes work in flight, flushes, then closes."""
        try:
            self._to_host.send_nowait(_EOF)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass

    async def receive(self) -> bytes:
        """The next frame from the host (one already buffered is taken at once).

        Raises:
            anyio.EndOfStream: the host closed the connection (or this client did).
        """
        return await self._from_host.get()

    async def receive_some(self) -> list[bytes]:
        """Every frame the host has sent and this client not yet received (at least one),
        in order: a reader that keeps up takes them a batch at a time.

        Raises:
            anyio.EndOfStream: the host closed the connection (or this client did).
        """
        return await self._from_host.get_some()

    @property
    def close_code(self) -> int | None:
        """The code the host closed with (1000, 1001, 1008 …), None while open."""
        return self._transport.close_code

    async def aclose(self) -> None:
        """Go away: the host cancels this connection's work. Idempotent."""
        self._transport.peer_gone()
        self._from_host.close_reader()
        await self._to_host.aclose()


@asynccontextmanager
async def open_memory_connection(
    handler: ConnectionHandler,
    *,
    bearer_token: str = "",
    buffer_frames: int = 64,
    peer: str = "memory",
) -> AsyncIterator[MemoryClient]:
    """Connect an in-process client to ``handler``, which serves the connection in a
    task of its own.

    Args:
        handler: serves one connection until it ends (e.g. ``host.serve_connection``).
        bearer_token: as if sent in an ``Authorization: Bearer`` header.
        buffer_frames: host → client frames buffered before the host's writer waits
            (then the host's outbox fills, and producers wait at its high-water mark).
        peer: the peer key the connection is accounted under (tests pass addresses
            such as ``"203.0.113.7"`` to act as distinct remote peers).

    Yields:
        The :class:`MemoryClient`. On exit it is closed (work still running is
        cancelled) and ``handler`` has returned.
    """
    to_host_send, to_host_recv = anyio.create_memory_object_stream[bytes | str | _Eof](math.inf)
    from_host = _Frames(buffer_frames)
    transport = MemoryTransport(to_host_recv, from_host, bearer_token=bearer_token, peer=peer)
    client = MemoryClient(to_host_send, from_host, transport)

    async def serve() -> None:
        await handler(transport)

    async with anyio.create_task_group() as tg:
        tg.start_soon(serve, name="memory connection")
        try:
            yield client
        finally:
            await client.aclose()
