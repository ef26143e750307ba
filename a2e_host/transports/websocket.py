"""WebSocket transport and server: one message per text frame (PROTOCOL.md §1, §8).

Layer: transports. Built on websockets' asyncio server (``websockets.asyncio.server``),
run under anyio's asyncio backend.

- Subprotocol ``a2e.v1`` is selected when the client offers it; a client offering none
  (or only others) is accepted without one.
- ``max_size`` is the hard frame cap (``max_message_bytes``): a bigger frame closes the
  connection with 1009, invalid UTF-8 in a text frame with 1007 (websockets does both);
  other connections carry on. A binary frame gets ``error`` ``invalid_message``.
- Keepalive pings every ``keepalive_interval`` seconds (websockets answers and times out).
- A request with an ``Origin`` header is refused with HTTP 403 unless the origin is in
  ``allowed_origins``; requests without one (non-browser clients) are accepted.
- ``Authorization: Bearer <token>`` satisfies a configured ``auth_token`` like the
  handshake's ``auth_token`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.typing import Subprotocol

from . import BinaryFrame, CloseCode, Incoming

if TYPE_CHECKING:
    from ..host import Host

__all__ = ["SUBPROTOCOL", "WebSocketTransport", "serve_websocket"]

SUBPROTOCOL = Subprotocol("a2e.v1")
CLOSE_TIMEOUT = 5.0
"""Seconds to wait for the client's close frame when the host closes."""


class WebSocketTransport:
    """One accepted WebSocket (implements :class:`~a2e_host.transports.Transport`)."""

    kind = "ws"

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.bearer_token = _bearer(ws)

    async def receive(self) -> Incoming:
        try:
            data = await self.ws.recv()
        except ConnectionClosed:
            raise anyio.BrokenResourceError from None
        if isinstance(data, bytes):
            return BinaryFrame(len(data))
        return data

    async def send_frames(self, frames: Sequence[bytes]) -> None:
        try:
            for frame in frames:
                await self.ws.send(frame, text=True)
        except ConnectionClosed:
            raise anyio.BrokenResourceError from None

    async def wait_peer_gone(self) -> None:
        await self.ws.wait_closed()

    async def aclose(self, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        await self.ws.close(code, reason)


def _bearer(ws: ServerConnection) -> str:
    request = ws.request
    if request is None:
        return ""
    value = request.headers.get("Authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _select_subprotocol(
    connection: ServerConnection, subprotocols: Sequence[Subprotocol]
) -> Subprotocol | None:
    return SUBPROTOCOL if SUBPROTOCOL in subprotocols else None


async def serve_websocket(
    host: Host, *, task_status: anyio.abc.TaskStatus[tuple[str, int]] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Serve ``host`` over WebSocket on ``config.host:config.port`` until
    :meth:`Host.shutdown <a2e_host.host.Host.shutdown>` is called, then stop accepting,
    let every connection drain (within the grace period) and close with 1001.

    Args:
        host: the host; its config gives the address, caps, keepalive and origins.
        task_status: receives ``(bound_host, bound_port)`` once listening (``port = 0``
            picks a free port).

    Raises:
        OSError: the address cannot be bound (e.g. the port is in use).
    """
    config = host.config

    async def handler(ws: ServerConnection) -> None:
        await host.serve_connection(WebSocketTransport(ws))

    origins: list[Any] = [None, *config.allowed_origins]
    async with serve(
        handler,
        config.host,
        config.port,
        subprotocols=[SUBPROTOCOL],
        select_subprotocol=_select_subprotocol,
        origins=origins,
        max_size=config.limits.max_message_bytes,
        ping_interval=config.keepalive_interval,
        ping_timeout=config.keepalive_interval,
        close_timeout=CLOSE_TIMEOUT,
        server_header="a2e-host",
        compression="deflate" if config.ws_compression else None,
    ) as server:
        bound = next(iter(server.sockets)).getsockname()
        host.log.info("websocket server started", url=f"ws://{_url_host(bound[0])}:{bound[1]}")
        task_status.started((bound[0], bound[1]))
        await host.wait_shutdown()
        server.close(close_connections=False)
        await server.wait_closed()


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
