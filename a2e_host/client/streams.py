"""What the client needs of a connection: :class:`MessageStream` (whole messages in and
out); the transports (stdio, websocket, memory) each give one."""

from __future__ import annotations

from typing import Protocol

from ..messages import Message

__all__ = ["MessageStream"]


class MessageStream(Protocol):
    """A connection as the client sees it: whole messages in and out.

    ``receive`` raises :class:`anyio.EndOfStream` (or any exception, treated alike) when the
    connection is gone.
    """

    async def send(self, message: Message) -> None: ...

    async def receive(self) -> Message: ...

    async def aclose(self) -> None: ...
