"""An async client of the A2E host: connect, handshake, run chains, cancel, ping.

Layer: client (anyio; not used by the host itself). It speaks the same wire as any agent
(PROTOCOL.md §1–§2, seed ``chain/*``) over three transports:

* :func:`connect_ws` — a WebSocket URL (``ws://127.0.0.1:8765``, subprotocol ``a2e.v1``);
* :func:`spawn_stdio` — a child process speaking NDJSON (``a2e-host stdio …``);
* :func:`connect_memory` — an in-process :class:`~a2e_host.runtime.host.Host` (what
  ``a2e-host run`` uses, so a local run takes exactly the path a wire request takes).

:func:`serve_ws` starts a host for you (``a2e-host serve --port 0`` as a child process, on
a free 127.0.0.1 port) and yields a client connected to it; :func:`open_ws_server` starts
only the server (:class:`WsServer`), for several clients.

Each is an async context manager that handshakes on enter and yields a :class:`Client`::

    async with connect_ws("ws://127.0.0.1:8765", agent_caps=["chains"]) as client:
        async for message in client.run_chain(nodes, "read", initial_input={"x": 1}):
            print(message)          # ChainEvent …, then the ChainResponse

Theory of operation: one background reader task per client receives every incoming
message and routes it by ``req_id`` to the memory object stream of the request waiting
for it (a chain run, a ping, the handshake), so several chains can run concurrently on
one client. Those per-request streams are unbounded: a run nobody iterates keeps its
events in memory until it is closed (:meth:`ChainRun.aclose`). When the connection ends,
every waiter gets :class:`ConnectionLost`.

A message no waiter claims — the answer to a ``chain/cancel`` sent after its chain
ended (``error invalid_message``), an ``error`` without ``req_id`` — is kept in
:attr:`Client.unrouted` (the last 100).

The messages are :mod:`a2e_host.messages` structs: :class:`~a2e_host.messages.ChainEvent`,
:class:`~a2e_host.messages.ChainResponse` (also exported by the package:
``from a2e_host import ChainEvent, ChainResponse``).

Errors: :class:`HostError` (the host answered with an ``error`` message; ``code`` is the
wire code, e.g. ``busy``), :class:`HandshakeFailed` (``ok`` false; ``reason``),
:class:`ConnectionLost`, :class:`ServerFailed` (:func:`serve_ws` could not start the
server), and :class:`TimeoutError` for a bounded wait that passed.
"""

from __future__ import annotations

import math
import re
import signal
import sys
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import anyio
import msgspec
from anyio.abc import Process
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from .chains.messages import (
    ChainCancel,
    ChainEvent,
    ChainNode,
    ChainRequest,
    ChainResponse,
    chain_codec,
)
from .codec import encode_line, encode_message
from .exceptions import A2EError
from .framing import LineSplitter, LineTooLong
from .messages import (
    ErrorMessage,
    HandshakeRequest,
    HandshakeResponse,
    Message,
    Ping,
    Pong,
    Shutdown,
)

__all__ = [
    "DEFAULT_AGENT_CAPS",
    "ChainRun",
    "Client",
    "ClientError",
    "ConnectionLost",
    "HandshakeFailed",
    "HostError",
    "MessageStream",
    "ServerFailed",
    "StdioStream",
    "WsServer",
    "connect_memory",
    "connect_ws",
    "open_client",
    "open_ws_server",
    "serve_ws",
    "spawn_stdio",
]

DEFAULT_AGENT_CAPS: tuple[str, ...] = ("chains", "tools", "proc", "skill")
"""Capabilities asked for when the caller names none (PROTOCOL.md §2)."""

_RESPONSE_GRACE = 30.0
"""Seconds a run waits past the chain's own ``timeout`` for the host's ``chain/resp``."""


# ── errors ──────────────────────────────────────────────────────────────────


class ClientError(A2EError):
    """Base of the errors this client raises itself."""

    code = "client_error"


class HostError(ClientError):
    """The host answered a request with an ``error`` message (PROTOCOL.md §2).

    Attributes:
        code: the wire code (``busy``, ``schema_violation``, ``capability_missing`` …).
        req_id: the id of the request it answers.
        detail / retryable / capability_name: as sent by the host.
        error: the :class:`~a2e_host.messages.ErrorMessage` itself.
    """

    def __init__(self, error: ErrorMessage) -> None:
        super().__init__(
            f"host refused the request ({error.code}): {error.message}",
            detail=dict(error.detail),
            retryable=error.retryable,
        )
        self.code = error.code
        self.req_id = error.req_id
        self.capability_name = error.capability_name
        self.error = error


class HandshakeFailed(ClientError):
    """The host's ``handshake/resp`` had ``ok: false``.

    Attributes:
        reason: ``auth_failed``, ``version_mismatch``, ``no_caps`` or ``server_error``.
        response: the :class:`~a2e_host.messages.HandshakeResponse`.
    """

    code = "handshake_failed"

    def __init__(self, response: HandshakeResponse) -> None:
        hints = {
            "auth_failed": "pass the host's token as auth_token",
            "no_caps": "ask for a capability the host serves, e.g. agent_caps=['chains']",
            "version_mismatch": "use a host that speaks protocol 1.x",
        }
        hint = hints.get(response.reason, "see the host's log on stderr")
        reason = response.reason or "no reason"
        super().__init__(f"handshake refused by the host ({reason}); {hint}")
        self.reason = response.reason
        self.response = response


class ConnectionLost(ClientError):
    """The connection ended while a request was waiting for its answer."""

    code = "connection_lost"


class ServerFailed(ClientError):
    """:func:`open_ws_server` could not start the server: it exited (a bad flag, a
    configuration it refuses) or did not say where it listens in time. The message ends
    with the server's last stderr lines."""

    code = "server_failed"


# ── transports ──────────────────────────────────────────────────────────────


class MessageStream(Protocol):
    """A connection as the client sees it: whole messages in and out.

    ``receive`` raises :class:`anyio.EndOfStream` (or any exception, treated alike) when the
    connection is gone.
    """

    async def send(self, message: Message) -> None: ...

    async def receive(self) -> Message: ...

    async def aclose(self) -> None: ...


class _WebSocketStream:
    """One JSON message per text frame (PROTOCOL.md §1)."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws

    async def send(self, message: Message) -> None:
        from websockets.exceptions import ConnectionClosed

        try:
            await self.ws.send(encode_message(message).decode("utf-8"))
        except ConnectionClosed as exc:
            raise anyio.BrokenResourceError(str(exc)) from exc

    async def receive(self) -> Message:
        from websockets.exceptions import ConnectionClosed

        try:
            frame = await self.ws.recv()
        except ConnectionClosed as exc:
            raise anyio.EndOfStream from exc
        return chain_codec.decode(frame)

    async def aclose(self) -> None:
        await self.ws.close()


class StdioStream:
    """NDJSON over a child process's stdin/stdout (PROTOCOL.md §1).

    Attributes:
        process: the :class:`anyio.abc.Process`.
        stderr_lines: the child's stderr lines when captured (empty when passed through).
    """

    def __init__(self, process: Process, max_line_bytes: int) -> None:
        self.process = process
        self.stderr_lines: list[str] = []
        self._splitter = LineSplitter(max_line_bytes)
        self._pending: deque[bytes | LineTooLong] = deque()
        self._eof = False

    async def send(self, message: Message) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(encode_line(message))

    async def receive(self) -> Message:
        assert self.process.stdout is not None
        while True:
            while self._pending:
                line = self._pending.popleft()
                if isinstance(line, LineTooLong):
                    raise ClientError(
                        f"the host sent a line of {line.size} bytes, over this client's "
                        f"{line.limit}; raise max_line_bytes in spawn_stdio"
                    )
                return chain_codec.decode(line)
            if self._eof:
                raise anyio.EndOfStream
            try:
                chunk = await self.process.stdout.receive()
            except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
                self._eof = True
                self._pending.extend(self._splitter.close())
                continue
            self._pending.extend(self._splitter.receive_data(chunk))

    async def pump_stderr(self) -> None:
        """Collect the child's stderr into :attr:`stderr_lines` until it closes."""
        if self.process.stderr is None:
            return
        splitter = LineSplitter(1 << 20)
        try:
            async for chunk in self.process.stderr:
                for line in splitter.receive_data(chunk):
                    if isinstance(line, bytes):
                        self.stderr_lines.append(line.decode("utf-8", "replace"))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        for line in splitter.close():
            if isinstance(line, bytes):
                self.stderr_lines.append(line.decode("utf-8", "replace"))

    async def aclose(self) -> None:
        if self.process.stdin is not None:
            try:
                await self.process.stdin.aclose()  # EOF on stdin = client gone
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                pass


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
            return chain_codec.decode(received)
        if received is None:
            raise anyio.EndOfStream
        return received  # type: ignore[no-any-return]

    async def aclose(self) -> None:
        closer = getattr(self.conn, "aclose", None)
        if closer is not None:
            await closer()


# ── the client ──────────────────────────────────────────────────────────────


class ChainRun:
    """One ``chain/req`` in flight: an async iterator of its messages.

    Iterating yields every :class:`~a2e_host.messages.ChainEvent` as it arrives and ends
    with the :class:`~a2e_host.messages.ChainResponse` (also kept as :attr:`response`).
    The request is sent on the first iteration step or by :meth:`start`, whichever comes
    first.

    Attributes:
        request: the :class:`~a2e_host.messages.ChainRequest` sent.
        req_id: its ``id``, the ``req_id`` of every event and of the response.
        response: the response once received, else None.

    Raises (while iterating):
        HostError: the host refused the request with an ``error`` message.
        ConnectionLost: the connection ended before the response.
        TimeoutError: nothing arrived for ``receive_timeout`` seconds.
    """

    def __init__(self, client: Client, request: ChainRequest, receive_timeout: float) -> None:
        self.client = client
        self.request = request
        self.req_id = request.id
        self.response: ChainResponse | None = None
        self._receive_timeout = receive_timeout
        self._started = False
        self._finished = False
        self._send, self._receive = client._open_route(request.id)

    async def start(self) -> ChainRun:
        """Send the request (once); returns self so ``run = await client.run_chain(…).start()``."""
        if not self._started:
            self._started = True
            await self.client._send(self.request)
        return self

    def __aiter__(self) -> ChainRun:
        return self

    async def __anext__(self) -> ChainEvent | ChainResponse:
        if self._finished:
            raise StopAsyncIteration
        await self.start()
        try:
            with anyio.fail_after(self._receive_timeout):
                message = await self._receive.receive()
        except TimeoutError:
            self._finish()
            raise TimeoutError(
                f"no message for chain request {self.req_id} within {self._receive_timeout:g} s"
            ) from None
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._finish()
            raise ConnectionLost(
                f"the connection closed before the chain/resp of request {self.req_id}"
                f"{self.client._closed_suffix()}"
            ) from None
        if isinstance(message, ChainResponse):
            self.response = message
            self._finish()
            return message
        if isinstance(message, ErrorMessage):
            self._finish()
            raise HostError(message)
        assert isinstance(message, ChainEvent)
        return message

    async def result(self) -> ChainResponse:
        """Drain the remaining events and return the response."""
        async for _message in self:
            pass
        assert self.response is not None
        return self.response

    async def cancel(self) -> None:
        """Ask the host to cancel this chain (``chain/cancel``); the response follows."""
        await self.client.cancel(self.req_id)

    async def aclose(self) -> None:
        """Stop listening (further messages of this request are dropped)."""
        self._finish()

    def _finish(self) -> None:
        if not self._finished:
            self._finished = True
            self.client._close_route(self.req_id)
            self._receive.close()


class Client:
    """A handshaken connection to an A2E host. Build one with :func:`connect_ws`,
    :func:`spawn_stdio`, :func:`connect_memory` or :func:`open_client`.

    Attributes:
        session_id: from ``handshake/resp``.
        handshake: the :class:`~a2e_host.messages.HandshakeResponse`.
        accepted_caps: capability names the host granted.
        features: *extensions* the ``chains`` capability speaks (e.g. ``["chain/cancel"]``).
        limits: the session's effective ceilings (PROTOCOL.md §6), from the ``chains`` metadata.
        max_parallel: chains in flight per session the host allows.
        transport: the underlying :class:`MessageStream` (e.g. :class:`StdioStream`).
        unrouted: the last 100 messages no waiter claimed: the ``error`` answering a
            ``chain/cancel`` sent after its chain ended (:meth:`cancel` does not wait for
            one), an ``error`` without ``req_id``, a message of a request already closed.
        url: the WebSocket URL (:func:`connect_ws`, :func:`serve_ws`), else ``""``.
        server: the :class:`WsServer` a :func:`serve_ws` client was started with, else
            None; it stays readable after the block (``client.server.returncode``).
    """

    def __init__(self, stream: MessageStream) -> None:
        self.transport = stream
        self.session_id = ""
        self.handshake: HandshakeResponse | None = None
        self.accepted_caps: list[str] = []
        self.features: list[str] = []
        self.limits: dict[str, int] = {}
        self.max_parallel = 0
        self.unrouted: deque[Message] = deque(maxlen=100)
        self.url = ""
        self.server: WsServer | None = None
        self._routes: dict[str, MemoryObjectSendStream[Message]] = {}
        self._closed = False
        self._closed_reason = ""
        self._handshake_id = ""
        self._send_lock = anyio.Lock()

    # -- requests --------------------------------------------------------------

    def run_chain(
        self,
        nodes: Sequence[ChainNode | dict[str, Any]],
        entry_node: str,
        *,
        initial_input: dict[str, Any] | None = None,
        streaming: bool = True,
        timeout: int | None = None,
        chain_id: str = "",
        correlation_id: str = "",
        receive_timeout: float | None = None,
    ) -> ChainRun:
        """Run a chain (seed ``chain/req``); iterate the result for its events and response.

        Args:
            nodes: the chain's nodes, Structs or ``ChainNode``-shaped dicts.
            entry_node: node_id of the entry root.
            initial_input: the context's ``input`` (default ``{}``).
            streaming: ask for ``chain/event`` frames.
            timeout: the chain's wall-clock limit, int seconds; None (left out) is
                ``min(300, max_timeout)`` of the session (PROTOCOL.md §5).
            chain_id: default: 8 hex digits.
            correlation_id: ties the chain to an agent turn.
            receive_timeout: seconds to wait for any one message; default ``timeout`` + 30.

        Returns:
            A :class:`ChainRun` (async iterator of ChainEvent, then the ChainResponse).

        Raises:
            msgspec.ValidationError: a node dict has a field of the wrong type.
        """
        request = ChainRequest(
            session_id=self.session_id,
            chain_id=chain_id,
            nodes=[n if isinstance(n, ChainNode) else msgspec.convert(n, ChainNode) for n in nodes],
            entry_node=entry_node,
            initial_input=dict(initial_input or {}),
            correlation_id=correlation_id,
            streaming=streaming,
        )
        if timeout is not None:
            request.timeout = timeout
        return self.send_request(request, receive_timeout=receive_timeout)

    def send_request(
        self, request: ChainRequest, *, receive_timeout: float | None = None
    ) -> ChainRun:
        """Like :meth:`run_chain` for a prepared request (its ``session_id`` is filled in,
        and a left-out ``timeout`` becomes ``min(300, max_timeout)`` of the session, since
        an encoded request always carries the field)."""
        if not request.session_id:
            request.session_id = self.session_id
        if request.timeout_omitted and "max_timeout" in self.limits:
            request.timeout = request.timeout_within(self.limits["max_timeout"])
        if receive_timeout is None:
            receive_timeout = max(request.timeout, 1) + _RESPONSE_GRACE
        return ChainRun(self, request, receive_timeout)

    async def cancel(self, req_id: str) -> None:
        """Send ``chain/cancel`` for a running chain (PROTOCOL.md §5, *extension*).

        The chain's run then ends with a response whose error code is ``cancelled``.
        """
        await self._send(ChainCancel(session_id=self.session_id, req_id=req_id))

    async def ping(self, *, wait_timeout: float = 10.0) -> float:
        """Ping the host; returns its ``uptime_seconds`` (float seconds).

        Raises:
            TimeoutError: no ``pong`` within ``wait_timeout`` seconds.
            HostError / ConnectionLost: as for any request.
        """
        reply = await self._request(Ping(), wait_timeout)
        assert isinstance(reply, Pong)
        return reply.uptime_seconds

    async def shutdown(self, grace: int = 10) -> None:
        """Ask the host to stop taking work and close within ``grace`` int seconds
        (the ``shutdown`` message's ``timeout``, PROTOCOL.md §2)."""
        await self._send(Shutdown(timeout=grace))

    async def aclose(self) -> None:
        """Close the connection; waiters get :class:`ConnectionLost`. Idempotent."""
        if self._closed:
            return
        self._mark_closed("closed by the client")
        with anyio.move_on_after(5, shield=True):
            try:
                await self.transport.aclose()
            except Exception:  # noqa: BLE001 - closing a broken transport is best effort
                pass

    @property
    def closed(self) -> bool:
        """Whether the connection has ended."""
        return self._closed

    # -- internals -------------------------------------------------------------

    async def _handshake(self, request: HandshakeRequest, wait_timeout: float) -> None:
        self._handshake_id = request.id
        reply = await self._request(request, wait_timeout)
        assert isinstance(reply, HandshakeResponse)
        self.handshake = reply
        if not reply.ok:
            raise HandshakeFailed(reply)
        self.session_id = reply.session_id
        self.max_parallel = reply.max_parallel
        self.accepted_caps = [c.capability for c in reply.accepted_caps if c.enabled]
        for cap in reply.accepted_caps:
            if cap.capability == "chains":
                self.features = list(cap.metadata.get("features", []))
                self.limits = dict(cap.metadata.get("limits", {}))

    async def _request(self, message: Message, wait_timeout: float) -> Message:
        send, receive = self._open_route(message.id)
        try:
            await self._send(message)
            with anyio.fail_after(wait_timeout):
                reply = await receive.receive()
        except TimeoutError:
            raise TimeoutError(
                f"no answer to {message.TYPE} within {wait_timeout:g} s; is the host alive?"
            ) from None
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise ConnectionLost(
                f"the connection closed before the answer to {message.TYPE}"
                f"{self._closed_suffix()}"
            ) from None
        finally:
            self._close_route(message.id)
            receive.close()
        if isinstance(reply, ErrorMessage):
            raise HostError(reply)
        return reply

    async def _send(self, message: Message) -> None:
        if self._closed:
            raise ConnectionLost(f"cannot send {message.TYPE}: the connection is closed")
        async with self._send_lock:
            try:
                await self.transport.send(message)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError) as exc:
                self._mark_closed(f"send failed: {exc}")
                raise ConnectionLost(
                    f"cannot send {message.TYPE}: the connection is gone ({exc or 'closed'})"
                ) from exc

    def _open_route(
        self, req_id: str
    ) -> tuple[MemoryObjectSendStream[Message], MemoryObjectReceiveStream[Message]]:
        send, receive = anyio.create_memory_object_stream[Message](math.inf)
        if self._closed:
            send.close()
        else:
            self._routes[req_id] = send
        return send, receive

    def _close_route(self, req_id: str) -> None:
        send = self._routes.pop(req_id, None)
        if send is not None:
            send.close()

    def _route(self, message: Message) -> None:
        req_id = getattr(message, "req_id", "")
        send = self._routes.get(req_id) if req_id else None
        if send is None and isinstance(message, HandshakeResponse):
            # a host that leaves req_id empty still answers the one pending handshake
            send = self._routes.get(self._handshake_id)
        if send is None:
            self.unrouted.append(message)
            return
        try:
            send.send_nowait(message)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            self._routes.pop(req_id, None)
            return
        if isinstance(message, ChainResponse | ErrorMessage | Pong | HandshakeResponse):
            self._close_route(req_id)

    async def _read_loop(self) -> None:
        """Receive and route until the connection ends; never raises."""
        reason = "closed by the host"
        try:
            while True:
                message = await self.transport.receive()
                self._route(message)
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            pass
        except A2EError as exc:
            reason = f"the host sent a message this client cannot read: {exc}"
        except Exception as exc:  # noqa: BLE001 - any transport failure ends the connection
            reason = f"{type(exc).__name__}: {exc}"
        self._mark_closed(reason)

    def _mark_closed(self, reason: str) -> None:
        if not self._closed:
            self._closed = True
            self._closed_reason = reason
        for send in list(self._routes.values()):
            send.close()
        self._routes.clear()

    def _closed_suffix(self) -> str:
        return f" ({self._closed_reason})" if self._closed_reason else ""


# ── opening clients ─────────────────────────────────────────────────────────


@asynccontextmanager
async def open_client(
    stream: MessageStream,
    *,
    agent_caps: Sequence[str] = DEFAULT_AGENT_CAPS,
    auth_token: str = "",
    limits: dict[str, int] | None = None,
    agent_id: str = "a2e-host-client",
    handshake_timeout: float = 10.0,
) -> AsyncIterator[Client]:
    """Run a :class:`Client` over an open :class:`MessageStream` and handshake.

    Args:
        stream: the connection.
        agent_caps: capability names to ask for (PROTOCOL.md §2).
        auth_token: the host's token, when it requires one.
        limits: ceilings to lower for this session, e.g. ``{"max_nodes": 100}`` (§6).
        agent_id: free-form name of this agent.
        handshake_timeout: seconds to wait for ``handshake/resp``.

    Raises:
        HandshakeFailed: the host answered ``ok: false``.
        HostError: the host answered the handshake with an ``error``.
        TimeoutError: no ``handshake/resp`` within ``handshake_timeout``.
        ConnectionLost: the connection ended first.
    """
    client = Client(stream)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(client._read_loop, name="a2e-client-reader")
            try:
                await client._handshake(
                    HandshakeRequest(
                        agent_id=agent_id,
                        agent_caps=list(agent_caps),
                        auth_token=auth_token,
                        limits=dict(limits or {}),
                    ),
                    handshake_timeout,
                )
                yield client
            finally:
                await client.aclose()
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


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


@asynccontextmanager
async def spawn_stdio(
    argv: Sequence[str] = ("a2e-host", "stdio"),
    *,
    agent_caps: Sequence[str] = DEFAULT_AGENT_CAPS,
    auth_token: str = "",
    limits: dict[str, int] | None = None,
    agent_id: str = "a2e-host-client",
    stderr: Literal["inherit", "capture"] = "inherit",
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    handshake_timeout: float = 10.0,
    close_timeout: float = 10.0,
    max_line_bytes: int = 64 * 1024 * 1024,
) -> AsyncIterator[Client]:
    """Spawn a host speaking NDJSON on stdio (PROTOCOL.md §1) and handshake.

    On exit stdin is closed (EOF: the host sees the client gone); the process gets
    ``close_timeout`` seconds to exit, then is terminated, then killed.

    Args:
        argv: the command, e.g. ``["a2e-host", "stdio", "--tools", "conformance"]``.
        stderr: ``inherit`` passes the host's log lines through to this process's stderr;
            ``capture`` keeps them in ``client.transport.stderr_lines``.
        cwd / env: for the child (env None = inherit).
        max_line_bytes: longest incoming line accepted, bytes.
        agent_caps / auth_token / limits / agent_id / handshake_timeout: see :func:`open_client`.

    Raises:
        OSError: the command cannot be started.
        HandshakeFailed / HostError / TimeoutError / ConnectionLost: see :func:`open_client`.
    """
    import subprocess

    process = await anyio.open_process(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if stderr == "capture" else None,
        cwd=cwd,
        env=env,
    )
    stream = StdioStream(process, max_line_bytes)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(stream.pump_stderr, name="a2e-client-stderr")
            try:
                async with open_client(
                    stream,
                    agent_caps=agent_caps,
                    auth_token=auth_token,
                    limits=limits,
                    agent_id=agent_id,
                    handshake_timeout=handshake_timeout,
                ) as client:
                    yield client
            finally:
                with anyio.CancelScope(shield=True):
                    await stream.aclose()
                    await _reap(process, close_timeout)
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await _reap(process, close_timeout)


async def _reap(process: Process, close_timeout: float) -> None:
    """Wait for the child to exit; terminate, then kill, when it overstays."""
    if process.returncode is not None:
        return
    with anyio.move_on_after(close_timeout):
        await process.wait()
        return
    if process.returncode is None:
        process.terminate()
        with anyio.move_on_after(5):
            await process.wait()
            return
        process.kill()
        with anyio.move_on_after(5):
            await process.wait()


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
    from .runtime.memory import open_memory_client

    try:
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
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


# ── a server of your own ────────────────────────────────────────────────────

_LISTENING = re.compile(r"a2e-host listening on (ws://\S+)")

SERVE_COMMAND: tuple[str, ...] = (sys.executable, "-m", "a2e_host", "serve")
"""The default server command: this interpreter's ``a2e-host serve``."""


@dataclass
class WsServer:
    """A running ``a2e-host serve`` child process (:func:`open_ws_server`).

    Attributes:
        url: where it listens, e.g. ``ws://127.0.0.1:40419``.
        process: the :class:`anyio.abc.Process`.
        stderr_lines: its last 1,000 stderr lines (its log) when captured; empty when
            passed through.
        returncode: its exit status once it has stopped (0 after an orderly stop), else
            None.
    """

    url: str
    process: Process
    stderr_lines: deque[str] = field(default_factory=lambda: deque(maxlen=1000))

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def connect(self, **kwargs: Any) -> AbstractAsyncContextManager[Client]:
        """:func:`connect_ws` to this server; ``kwargs`` as for it (``agent_caps``,
        ``auth_token``, …). Use as ``async with server.connect() as client:``."""
        return connect_ws(self.url, **kwargs)


@asynccontextmanager
async def open_ws_server(
    args: Sequence[str] = (),
    *,
    command: Sequence[str] = SERVE_COMMAND,
    stderr: Literal["inherit", "capture"] = "capture",
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    start_timeout: float = 30.0,
    close_timeout: float = 15.0,
) -> AsyncIterator[WsServer]:
    """Start ``a2e-host serve`` on a free 127.0.0.1 port as a child process; stop it on exit.

    The server is the real thing — its own process, configuration and signal handling —
    so a test of an agent exercises what a deployment runs. It is started with
    ``--host 127.0.0.1 --port 0`` after ``args`` (each unless ``args`` gives it: an
    explicit ``--port P`` is honoured) and found by the line it prints once listening.
    On exit it gets SIGTERM (the orderly stop: chains in flight are given
    ``shutdown_grace`` seconds, then cancelled), then ``close_timeout`` seconds to exit,
    then SIGKILL.

    Args:
        args: ``serve`` flags, e.g. ``["--tools", "conformance", "--allow-proc", "wc"]``;
            ``--host`` / ``--port`` given here replace ``127.0.0.1`` / ``0`` (a free port).
        command: the server command; default this interpreter's ``python -m a2e_host
            serve``, so no PATH lookup is involved.
        stderr: ``capture`` keeps the server's log in :attr:`WsServer.stderr_lines`;
            ``inherit`` copies it to this process's stderr as it comes.
        cwd / env: for the child (env None = inherit; ``A2E_*`` variables apply).
        start_timeout: seconds to wait for the server to listen.
        close_timeout: seconds the server gets to exit after SIGTERM.

    Raises:
        ServerFailed: the server exited first (e.g. an unknown tool pack: its message is
            in the exception) or did not listen within ``start_timeout``.
        OSError: the command cannot be started.
    """
    import subprocess

    argv = [*command, *args]
    for flag, default in (("--host", "127.0.0.1"), ("--port", "0")):
        if not any(arg == flag or arg.startswith(f"{flag}=") for arg in args):
            argv += [flag, default]
    process = await anyio.open_process(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        cwd=cwd, env=env,
    )
    server = WsServer(url="", process=process)
    listening = anyio.Event()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_read_server_stderr, server, stderr, listening)
            with anyio.move_on_after(start_timeout):
                await listening.wait()
            if not server.url:
                with anyio.move_on_after(1):
                    await process.wait()  # let the last lines of a failed start arrive
                tail = "\n".join(list(server.stderr_lines)[-10:])
                state = (f"exited with status {process.returncode}"
                         if process.returncode is not None
                         else f"did not listen within {start_timeout:g} s")
                raise ServerFailed(f"the server {state}: {' '.join(argv)}"
                                   + (f"\n{tail}" if tail else ""))
            try:
                yield server
            finally:
                with anyio.CancelScope(shield=True):
                    await _stop(process, close_timeout, signal.SIGTERM)
                tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process, close_timeout, signal.SIGTERM)


async def _read_server_stderr(
    server: WsServer, mode: str, listening: anyio.Event
) -> None:
    """Keep the server's stderr flowing (a full pipe would block its log), note where it
    listens, and keep or copy each line."""
    assert server.process.stderr is not None
    splitter = LineSplitter(1 << 20)
    try:
        async for chunk in server.process.stderr:
            for line in splitter.receive_data(chunk):
                if not isinstance(line, bytes):
                    continue
                text = line.decode("utf-8", "replace")
                if not server.url:
                    match = _LISTENING.search(text)
                    if match:
                        server.url = match.group(1)
                        listening.set()
                if mode == "inherit":
                    print(text, file=sys.stderr, flush=True)
                else:
                    server.stderr_lines.append(text)
    except (anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass
    listening.set()  # the server exited: stop waiting


async def _stop(process: Process, close_timeout: float, signum: signal.Signals) -> None:
    """Signal the child, then :func:`_reap` it (terminate, then kill, if it overstays)."""
    if process.returncode is not None:
        return
    try:
        process.send_signal(signum)
    except ProcessLookupError:
        pass
    await _reap(process, close_timeout)


@asynccontextmanager
async def serve_ws(
    args: Sequence[str] = (),
    *,
    agent_caps: Sequence[str] = DEFAULT_AGENT_CAPS,
    auth_token: str = "",
    limits: dict[str, int] | None = None,
    agent_id: str = "a2e-host-client",
    command: Sequence[str] = SERVE_COMMAND,
    stderr: Literal["inherit", "capture"] = "capture",
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    start_timeout: float = 30.0,
    close_timeout: float = 15.0,
    open_timeout: float = 10.0,
) -> AsyncIterator[Client]:
    """Start a WebSocket host on a free 127.0.0.1 port and yield a client connected to it.

    :func:`open_ws_server` then :func:`connect_ws`; on exit the client closes and the
    server stops (SIGTERM). The client's :attr:`Client.url` says where the server listens
    and :attr:`Client.server` is the :class:`WsServer` (its ``returncode`` readable after
    the block)::

        async with serve_ws(["--tools", "conformance"], agent_caps=["chains"]) as client:
            async for message in client.run_chain(nodes, "a"):
                print(message)

    Args:
        args: ``serve`` flags, e.g. ``["--tools", "conformance"]``; an explicit
            ``--port P`` is honoured (see :func:`open_ws_server`).
        agent_caps / auth_token / limits / agent_id / open_timeout: see :func:`connect_ws`.
        command / stderr / cwd / env / start_timeout / close_timeout: see
            :func:`open_ws_server`.

    Raises:
        ServerFailed: the server did not start (see :func:`open_ws_server`).
        HandshakeFailed / HostError / TimeoutError / ConnectionLost: see :func:`open_client`.
    """
    async with open_ws_server(
        args, command=command, stderr=stderr, cwd=cwd, env=env, start_timeout=start_timeout,
        close_timeout=close_timeout,
    ) as server:
        async with server.connect(
            agent_caps=agent_caps, auth_token=auth_token, limits=limits, agent_id=agent_id,
            open_timeout=open_timeout,
        ) as client:
            client.server = server
            yield client
