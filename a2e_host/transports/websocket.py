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
- At most ``max_connections`` connections are open at once, and at most
  ``max_connections_per_peer`` from one peer address
  (:func:`~a2e_host.admission.peer_key`); past either, the upgrade request gets HTTP 503
  with ``Retry-After`` and a sentence naming the ceiling, and the host logs a
  ``connection refused`` warning (at most one a second, with the count of the others).
  The opening handshake (TCP accept to upgrade) is bounded by ``handshake_timeout`` too.
- Plain HTTP ``GET`` (and ``HEAD``: headers only) requests for a path in ``routes`` (the
  host's ``/healthz``, ``/readyz``, ``/metrics``) are answered by the route's callable,
  before admission counts anything; the transport only sends the bytes it is handed.
  Any other method on such a path gets 405 (``Allow: GET, HEAD``).
- Once ``stop`` is set the server *drains*: upgrades are refused with HTTP 503 (``host
  shutting down``), the routes keep answering (so ``/readyz`` can say 503 to a load
  balancer), and the port closes when the last connection has ended.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from http import HTTPStatus
from typing import Any

import anyio
from websockets.asyncio.server import ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.typing import Subprotocol

from ..admission import ConnectionLimiter, Refusal, peer_key
from ..config import HostConfig
from ..logs import get_logger
from . import BinaryFrame, CloseCode, ConnectionHandler, Incoming

__all__ = ["HttpRoute", "SUBPROTOCOL", "WebSocketTransport", "serve_websocket"]

HttpRoute = Callable[[], tuple[int, str, bytes]]
"""A plain HTTP ``GET`` route: returns ``(status, Content-Type, body bytes)``."""

SUBPROTOCOL = Subprotocol("a2e.v1")
CLOSE_TIMEOUT = 5.0
"""Seconds to wait for the client's close frame when the host closes."""


class WebSocketTransport:
    """One accepted WebSocket (implements :class:`~a2e_host.transports.Transport`)."""

    kind = "ws"

    def __init__(self, ws: ServerConnection) -> None:
        self.ws = ws
        self.bearer_token = _bearer(ws)
        self.peer = _peer(ws)

    @property
    def peer_close_code(self) -> int | None:
        """The code of the close frame the peer sent, None when it sent none."""
        received = self.ws.protocol.close_rcvd
        return int(received.code) if received is not None else None

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


def _peer(ws: ServerConnection) -> str:
    try:
        address = ws.remote_address
    except Exception:  # the transport is already gone
        address = None
    if isinstance(address, tuple | list) and address:
        return peer_key(str(address[0]))
    return peer_key(str(address)) if address else "unknown"


class _Admission:
    """The ``process_request`` hook: count each connection before its upgrade, refuse
    it with 503 past a ceiling (see the module docstring)."""

    LOG_EVERY = 1.0  # seconds between two "connection refused" warnings

    def __init__(self, config: HostConfig, log: Any,
                 routes: Mapping[str, HttpRoute] | None = None) -> None:
        self.log = log
        self.routes = dict(routes or {})
        self.draining = False
        self.retry_after = str(math.ceil(config.handshake_timeout))
        self.limiter = ConnectionLimiter(config.max_connections, config.max_connections_per_peer)
        self._logged_at = -math.inf
        self._unlogged = 0

    def __call__(self, connection: ServerConnection, request: Request) -> Response | None:
        route = self.routes.get(request.path.partition("?")[0]) if self.routes else None
        if route is not None:
            if request.method == "GET":
                return _http_response(*route())
            if request.method == "HEAD":  # the GET answer's headers, no body
                status, content_type, body = route()
                return _http_response(status, content_type, body, head=True)
            return _http_response(
                HTTPStatus.METHOD_NOT_ALLOWED, "text/plain; charset=utf-8",
                f"method {request.method} is not allowed here; use GET or HEAD\n".encode())
        if self.draining:
            response = connection.respond(HTTPStatus.SERVICE_UNAVAILABLE,
                                          "host shutting down; connect to another host\n")
            response.headers["Retry-After"] = self.retry_after
            return response
        peer = _peer(connection)
        refusal = self.limiter.acquire(connection, peer)
        if refusal is not None and self.limiter.prune(_is_gone):
            refusal = self.limiter.acquire(connection, peer)
        if refusal is None:
            return None
        self._log_refusal(refusal)
        response = connection.respond(
            HTTPStatus.SERVICE_UNAVAILABLE,
            f"connection refused: {refusal}; try again later\n",
        )
        response.headers["Retry-After"] = self.retry_after
        return response

    def release(self, connection: ServerConnection) -> None:
        self.limiter.release(connection)

    def after_response(
        self, connection: ServerConnection, request: Request, response: Response
    ) -> None:
        """The ``process_response`` hook: an upgrade refused after it was counted (a
        browser ``Origin``, a bad request) never reaches the handler, whose ``finally``
        releases the count; release it here."""
        if response.status_code != HTTPStatus.SWITCHING_PROTOCOLS:
            self.limiter.release(connection)

    def _log_refusal(self, refusal: Refusal) -> None:
        now = time.monotonic()
        if now - self._logged_at < self.LOG_EVERY:
            self._unlogged += 1
            return
        self.log.warning("connection refused", peer=refusal.peer, ceiling=refusal.ceiling,
                         limit=refusal.limit, open=len(self.limiter),
                         also_refused_since_last=self._unlogged)
        self._logged_at = now
        self._unlogged = 0


def _http_response(status: int, content_type: str, body: bytes, *, head: bool = False
                   ) -> Response:
    headers = Headers([
        ("Date", email.utils.formatdate(usegmt=True)),
        ("Connection", "close"),
        ("Content-Length", str(len(body))),
        ("Content-Type", content_type),
        ("Cache-Control", "no-store"),
    ])
    if status == HTTPStatus.METHOD_NOT_ALLOWED:
        headers["Allow"] = "GET, HEAD"
    return Response(status, HTTPStatus(status).phrase, headers, b"" if head else body)


def _is_gone(token: Hashable) -> bool:
    transport = getattr(token, "transport", None)
    return transport is None or bool(transport.is_closing())


def _select_subprotocol(
    connection: ServerConnection, subprotocols: Sequence[Subprotocol]
) -> Subprotocol | None:
    return SUBPROTOCOL if SUBPROTOCOL in subprotocols else None


async def serve_websocket(
    handler: ConnectionHandler,
    config: HostConfig,
    *,
    stop: anyio.Event,
    log: Any = None,
    routes: Mapping[str, HttpRoute] | None = None,
    task_status: anyio.abc.TaskStatus[tuple[str, int]] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``handler`` over WebSocket on ``config.host:config.port`` until ``stop`` is
    set, then stop accepting and return once every handler has returned (a host closes
    its connections with 1001 within its grace period when it stops).

    Args:
        handler: serves one accepted connection until it ends (``host.serve_connection``).
        config: the address, frame cap, connection ceilings, keepalive, origins and
            compression.
        stop: the stop signal (e.g. set by ``Host.shutdown``): upgrades are refused
            from then on; the port closes once every connection has ended.
        log: a structlog logger; None takes the package's.
        routes: path → :data:`HttpRoute` for plain HTTP ``GET`` requests (the query
            string is ignored); None or empty: none.
        task_status: receives ``(bound_host, bound_port)`` once listening (``port = 0``
            picks a free port).

    Raises:
        OSError: the address cannot be bound (e.g. the port is in use).
    """
    log = log if log is not None else get_logger()
    admission = _Admission(config, log, routes)
    serving = 0
    drained = anyio.Event()

    async def serve_one(ws: ServerConnection) -> None:
        nonlocal serving
        serving += 1
        try:
            await handler(WebSocketTransport(ws))
        finally:
            admission.release(ws)
            serving -= 1
            if serving == 0 and admission.draining:
                drained.set()

    origins: list[Any] = [None, *config.allowed_origins]
    async with serve(
        serve_one,
        config.host,
        config.port,
        subprotocols=[SUBPROTOCOL],
        select_subprotocol=_select_subprotocol,
        origins=origins,
        process_request=admission,
        process_response=admission.after_response,
        open_timeout=config.handshake_timeout,
        max_size=config.limits.max_message_bytes,
        ping_interval=config.keepalive_interval,
        ping_timeout=config.keepalive_interval,
        close_timeout=CLOSE_TIMEOUT,
        server_header="a2e-host",
        compression="deflate" if config.ws_compression else None,
    ) as server:
        bound = next(iter(server.sockets)).getsockname()
        log.info("websocket server started", url=f"ws://{_url_host(bound[0])}:{bound[1]}")
        task_status.started((bound[0], bound[1]))
        await stop.wait()
        admission.draining = True
        if serving:
            await drained.wait()
        server.close(close_connections=False)
        await server.wait_closed()


def _url_host(address: str) -> str:
    return f"[{address}]" if ":" in address else address
