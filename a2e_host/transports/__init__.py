"""Transports: bytes ↔ frames for one connection (PROTOCOL.md §1).

Layer: transports. No protocol knowledge: a transport delivers whole incoming frames and
writes whole outgoing ones; the runtime (:mod:`a2e_host.runtime.connection`) decodes,
dispatches and maps errors. A transport knows nothing above it either: like websockets'
``serve(handler)``, each serves a :data:`ConnectionHandler` (a host's
``serve_connection``) one :class:`Transport` per connection, and a server stops on a
stop :class:`anyio.Event` it is given. It must not import the runtime, plugins or chains.

- :mod:`.memory`: in-process, for ``a2e-host run``, tests and benchmarks;
- :mod:`.stdio`: NDJSON on stdin/stdout;
- :mod:`.websocket`: one message per text frame, subprotocol ``a2e.v1``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from ..framing import LineTooLong

__all__ = [
    "Transport",
    "ConnectionHandler",
    "BinaryFrame",
    "LineTooLong",
    "Incoming",
    "CloseCode",
]


@dataclass(frozen=True, slots=True)
class BinaryFrame:
    """A WebSocket binary frame arrived (the protocol speaks text frames only).

    Attributes:
        size: its length in bytes.
    """

    size: int


Incoming = bytes | str | LineTooLong | BinaryFrame
"""What :meth:`Transport.receive` yields: one message's text (UTF-8 bytes, or ``str``
when the transport already decoded it), or a marker for a frame it refused."""


class CloseCode:
    """WebSocket close codes (RFC 6455 §7.4.1) the host uses; stdio ignores them."""

    NORMAL = 1000  # the agent's ``shutdown`` completed
    GOING_AWAY = 1001  # the host is shutting down (signal)
    POLICY_VIOLATION = 1008  # auth_failed, no handshake within handshake_timeout
    INTERNAL_ERROR = 1011  # a bug ended the connection


class Transport(Protocol):
    """One connection's frames, as the runtime sees them.

    Attributes:
        kind: ``"memory"``, ``"stdio"`` or ``"ws"`` (for logs).
        bearer_token: a token from the transport's own handshake (WebSocket
            ``Authorization: Bearer``), ``""`` when none.
        peer: who is at the other end, for per-peer accounting
            (:func:`~a2e_host.admission.peer_key` of the remote address; ``"stdio"``,
            ``"memory"`` without one).

    A transport that knows how the peer closed may also offer ``peer_close_code``
    (``int | None``): the close code the peer sent when it closed first (WebSocket
    close frame), None otherwise; the runtime logs it.
    """

    kind: str
    bearer_token: str
    peer: str

    async def receive(self) -> Incoming:
        """The next incoming frame.

        Raises:
            anyio.EndOfStream: input ended in an orderly way (stdin EOF): the peer may
                still read, so work in flight finishes and its frames are flushed.
            anyio.BrokenResourceError: the peer is gone: everything is cancelled.
        """
        ...

    async def send_frames(self, frames: Sequence[bytes]) -> None:
        """Write frames (each one JSON message, no newline), in order.

        Raises:
            anyio.BrokenResourceError: the peer is gone.
        """
        ...

    async def wait_peer_gone(self) -> None:
        """Return when the peer can no longer receive (e.g. stdout's reader closed the
        pipe); may never return if the transport cannot tell."""
        ...

    async def aclose(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Close the connection (WebSocket: with ``code``). Idempotent, bounded."""
        ...



ConnectionHandler = Callable[[Transport], Awaitable[None]]
"""Serves one connection until it ends, e.g. :meth:`Host.serve_connection
<a2e_host.runtime.host.Host.serve_connection>`. It closes the transport
(:meth:`Transport.aclose`) before it returns and does not raise for the connection's own
failures."""
