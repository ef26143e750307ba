"""One connection at run time: reader, writer, dispatch and the work it started.

Layer: runtime (anyio). Every transport (memory, stdio, WebSocket) goes through
:class:`HostConnection`: the same decode, session checks, routing and error mapping.

Tasks, all in one task group per connection:

- the **reader** takes frames from the transport, decodes them and dispatches each in
  turn (core messages here, the rest to their plugin's ``handle``, which must return
  quickly: long work goes to ``ctx.start_soon``);
- the **writer** drains the :class:`~a2e_host.runtime.outbox.Outbox` to the transport;
- a **watcher** notices a peer that is gone while we are not reading (stdout closed);
- **work** tasks started by plugins, each in its own cancel scope.

How a connection ends:

=====================  =============================================================
cause                  what happens
=====================  =============================================================
peer gone              (WS closed, memory client closed, stdout closed) plugins are
                       told (``session_closed``), every task is cancelled at once
end of input           (stdin EOF) stop reading, let work finish, flush, close
``shutdown``           stop taking work, let work finish within its ``timeout``,
                       cancel the rest (their responses are still sent), flush, close
                       with 1000
host shutdown          (signal) the same within ``config.shutdown_grace``, close 1001
``auth_failed``        after the peer's turn in the host's
                       :class:`~a2e_host.admission.AuthThrottle` (``auth_failure_delay``
                       per failure and peer), the refusal is flushed, then close 1008
no handshake           none completed within ``config.handshake_timeout`` of opening:
                       ``error`` ``handshake_required``, then close with 1008
=====================  =============================================================

The ``connection closed`` log line says how it ended: ``close_code`` is the code the
host closed with, or the one the peer sent when it closed first (a WebSocket close
frame: ``closed_by: "peer"``); ``dropped`` is true only when the peer vanished without
an orderly close (no close frame, a broken pipe).
"""

from __future__ import annotations

import gc
import math
import threading
from collections.abc import Awaitable, Callable
from itertools import count
from typing import TYPE_CHECKING, Any

import anyio

from ..codec import MessageCodec
from ..exceptions import (
    HandshakeRequired,
    InvalidMessage,
    MessageTooLarge,
    RemoteProtocolError,
    UnknownType,
)
from ..framing import LineTooLong
from ..messages import HandshakeRequest, HandshakeResponse, Message, Ping, Pong, Shutdown
from ..session import ConnectionSession, Session
from ..transports import BinaryFrame, CloseCode, Incoming, Transport
from .outbox import Outbox

if TYPE_CHECKING:
    from ..host import Host
    from ..plugin import Outbox as OutboxProtocol
    from ..plugin import Plugin, SessionInfo

__all__ = ["HostConnection", "ConnectionContext"]

CANCEL_GRACE = 5.0
GC_PAUSED_DECODE_BYTES = 256 * 1024
"""Messages over this many bytes are decoded with the cyclic garbage collector paused:
decoding 14 MB of nested lists took 2 s, most of it collections over its own new
containers. (A worker thread would not help: msgspec holds the interpreter lock while it
decodes.)"""
_gc_lock = threading.Lock()
_gc_pausers = 0  # decodes running with the cyclic collector paused
_gc_was_enabled = False


def _decode_without_gc(codec: MessageCodec, frame: bytes | str) -> Message:
    """``codec.decode`` with the cyclic garbage collector paused: a decoded JSON
    value has no reference cycles, and collections triggered by its millions of new
    containers would scan the whole heap again and again (2.0 s → 0.6 s for 14 MB)."""
    global _gc_pausers, _gc_was_enabled
    with _gc_lock:
        if _gc_pausers == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pausers += 1
    try:
        return codec.decode(frame)
    finally:
        with _gc_lock:
            _gc_pausers -= 1
            if _gc_pausers == 0 and _gc_was_enabled:
                gc.enable()
"""Seconds cancelled work gets to send its final frames before the connection closes."""

FLUSH_TIMEOUT = 5.0
"""Seconds the writer gets to flush queued frames at close."""

_conn_ids = count(1)


class ConnectionContext:
    """A plugin's view of the connection for one message (implements
    :class:`~a2e_host.plugin.PluginContext`)."""

    __slots__ = ("_conn", "session", "outbox", "log", "_req_id", "_capability")

    def __init__(self, conn: HostConnection, session: Session, message: Message, capability: str):
        self._conn = conn
        self.session: SessionInfo = session
        self.outbox: OutboxProtocol = conn.outbox
        self.log = conn.log.bind(req_id=message.id)
        self._req_id = message.id
        self._capability = capability

    @property
    def closing(self) -> bool:
        """True once the connection stopped taking work (``shutdown``, signal, EOF)."""
        return self._conn.closing

    @closing.setter
    def closing(self, value: bool) -> None:
        raise AttributeError("closing is read-only: it follows the connection's state")

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str = "") -> None:
        """Run ``fn(*args)`` in the connection's task group; an exception it raises is sent
        as an ``error`` with this message's id as ``req_id``."""
        self._conn.start_work(fn, args, name=name, req_id=self._req_id, capability=self._capability)


class HostConnection:
    """Serves one transport connection until it ends (see the module docstring).

    Args:
        host: the :class:`~a2e_host.host.Host` (plugins, config, error mapping).
        transport: the connection's frames.
        conn_id: a name for logs; ``c<n>`` when empty.
    """

    def __init__(self, host: Host, transport: Transport, conn_id: str = "") -> None:
        self.host = host
        self.config = host.config
        self.transport = transport
        self.conn_id = conn_id or f"c{next(_conn_ids)}"
        self.log = host.log.bind(conn_id=self.conn_id, transport=transport.kind)
        self.outbox = Outbox(
            self.config.outbox_high_water, self.config.outbox_high_water_bytes
        )
        self.sessions = ConnectionSession(
            self.config,
            host.served_capabilities(),
            gates=host.gates(),
            bearer_token=transport.bearer_token,
        )
        self.peer = transport.peer or transport.kind
        self._tg: anyio.abc.TaskGroup | None = None
        self._work: set[anyio.CancelScope] = set()
        self._idle = anyio.Event()
        self._idle.set()
        self._stop = anyio.Event()
        self._dropped = False
        self._grace = math.inf
        self._grace_scope: anyio.CancelScope | None = None
        self._close_code = CloseCode.NORMAL
        self._close_reason = ""
        self._deadline = anyio.CancelScope()

    @property
    def session(self) -> Session | None:
        return self.sessions.session

    @property
    def closing(self) -> bool:
        """Whether the connection stopped taking work."""
        return self.sessions.closing or self._stop.is_set()

    # ── life cycle ─────────────────────────────────────────────────────────

    async def run(self) -> None:
        """Serve until the connection ends; every task it started has ended on return."""
        self.log.info("connection opened", peer=self.peer)
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._write_loop, name=f"{self.conn_id} writer")
                tg.start_soon(self._read_loop, name=f"{self.conn_id} reader")
                tg.start_soon(self._watch_peer, name=f"{self.conn_id} watcher")
                tg.start_soon(self._enforce_handshake_deadline,
                              name=f"{self.conn_id} handshake deadline")
                await self._stop.wait()
                if not self._dropped:
                    await self._drain()
                tg.cancel_scope.cancel()
        finally:
            self.sessions.close()
            self.outbox.close()
            with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_GRACE):
                session = self.session
                if session is not None:
                    await self.host.session_closed(session, self.log)
                await self.transport.aclose(self._close_code, self._close_reason)
            self._log_closed()

    def _log_closed(self) -> None:
        if not self._dropped:
            self.log.info("connection closed", dropped=False, close_code=self._close_code,
                          closed_by="host", reason=self._close_reason)
            return
        peer_code = _peer_close_code(self.transport)
        if peer_code is None:
            self.log.info("connection closed", dropped=True, close_code=None)
        else:
            self.log.info("connection closed", dropped=False, close_code=peer_code,
                          closed_by="peer")

    async def _enforce_handshake_deadline(self) -> None:
        """Close a connection that has no session ``handshake_timeout`` seconds after it
        opened (a handshake that failed authentication stops the clock: its answer
        waits its turn in the throttle instead)."""
        timeout = self.config.handshake_timeout
        with self._deadline:
            await anyio.sleep(timeout)
            if self.session is not None or self._stop.is_set():
                return
            self.log.info("no handshake within handshake_timeout; closing",
                          handshake_timeout=timeout)
            self._send_error(
                HandshakeRequired(
                    f"no successful handshake/req within {timeout:g} s of connecting "
                    "(the host's handshake_timeout); send handshake/req first, on a new "
                    "connection",
                    detail={"handshake_timeout": timeout},
                ),
                req_id="",
                message_type="",
            )
            self.request_stop(0.0, code=CloseCode.POLICY_VIOLATION, reason="handshake timeout")

    async def _drain(self) -> None:
        """Orderly end: finish work within the grace period, cancel the rest, flush."""
        if self._work:
            self.log.info(
                "waiting for work in flight",
                tasks=len(self._work),
                grace=self._grace if math.isfinite(self._grace) else None,
            )
            with anyio.move_on_after(self._grace) as self._grace_scope:
                await self._wait_idle()
            if self._work:
                self.log.info("cancelling work past the grace period", tasks=len(self._work))
                for scope in list(self._work):
                    scope.cancel()
                with anyio.move_on_after(CANCEL_GRACE):
                    await self._wait_idle()
        with anyio.move_on_after(FLUSH_TIMEOUT):
            await self.outbox.wait_flushed()

    def request_stop(self, grace: float, *, code: int = CloseCode.NORMAL, reason: str = "") -> None:
        """Stop taking work; close once work has finished or ``grace`` seconds passed.

        A later request may shorten the grace period, never lengthen it; the first
        request's close ``code`` and ``reason`` stand.
        """
        self.sessions.stop()
        self._grace = min(self._grace, max(0.0, grace))
        if self._grace_scope is not None:
            deadline = anyio.current_time() + self._grace
            self._grace_scope.deadline = min(self._grace_scope.deadline, deadline)
        if not self._stop.is_set():
            self._close_code = code
            self._close_reason = reason
        self._stop.set()

    def drop(self, why: str) -> None:
        """The peer is gone: cancel everything now."""
        if not self._dropped:
            self.log.info("peer gone; cancelling the connection's work", why=why)
        self._dropped = True
        self.sessions.stop()
        self._stop.set()
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    # ── work ───────────────────────────────────────────────────────────────

    def start_work(
        self,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        *,
        name: str,
        req_id: str,
        capability: str,
    ) -> None:
        """Start ``fn(*args)`` in the connection's task group, tracked for draining."""
        if self._tg is None:
            raise RuntimeError("the connection is not running")
        scope = anyio.CancelScope()
        self._work.add(scope)
        if self._idle.is_set():
            self._idle = anyio.Event()
        self._tg.start_soon(self._run_work, scope, fn, args, req_id, capability, name=name or None)

    async def _run_work(
        self,
        scope: anyio.CancelScope,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        req_id: str,
        capability: str,
    ) -> None:
        try:
            with scope:
                await fn(*args)
        except Exception as exc:
            self._send_error(exc, req_id=req_id, message_type="", capability=capability)
        finally:
            self._work.discard(scope)
            if not self._work:
                self._idle.set()

    async def _wait_idle(self) -> None:
        while self._work:
            await self._idle.wait()

    # ── reader, writer, watcher ───────────────────────────────────────────

    async def _read_loop(self) -> None:
        while True:
            try:
                frame = await self.transport.receive()
            except anyio.EndOfStream:
                self.log.info("end of input; finishing work in flight")
                self.request_stop(math.inf)
                return
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self.drop("the peer closed the connection")
                return
            await self._receive_frame(frame)

    async def _receive_frame(self, frame: Incoming) -> None:
        try:
            message = self._decode(frame)
        except Exception as exc:
            self._send_error(exc, req_id=getattr(exc, "req_id", ""), message_type="")
            return
        await self._dispatch(message)

    def _decode(self, frame: Incoming) -> Message:
        limit = self._max_message_bytes()
        if isinstance(frame, LineTooLong):
            raise self._too_large(frame.size, frame.limit)
        if isinstance(frame, BinaryFrame):
            raise InvalidMessage(
                f"binary frame of {frame.size} bytes refused; send each message as one "
                "JSON text frame"
            )
        size = len(frame) if isinstance(frame, bytes) else _utf8_length(frame, limit)
        if size > limit:
            raise self._too_large(size, limit)
        if size > GC_PAUSED_DECODE_BYTES:
            return _decode_without_gc(self.host.codec, frame)
        return self.host.codec.decode(frame)

    def _max_message_bytes(self) -> int:
        session = self.session
        if session is not None:
            return session.limits.effective.max_message_bytes
        return self.config.limits.max_message_bytes

    def _too_large(self, size: int, limit: int) -> MessageTooLarge:
        return MessageTooLarge(
            f"message of {size} bytes is over max_message_bytes ({limit}); send a smaller "
            "message (e.g. pass large data by reference)",
            detail={"size": size, "limit": limit},
        )

    async def _dispatch(self, message: Message) -> None:
        mtype = message.TYPE
        plugin: Plugin | None = None
        try:
            if isinstance(message, HandshakeRequest):
                await self._handshake(message)
            elif isinstance(message, Ping):
                self.sessions.check_core(message)
                self.outbox.send_nowait(
                    Pong(req_id=message.id, uptime_seconds=self.host.uptime_seconds)
                )
            elif isinstance(message, Shutdown):
                self.sessions.check_core(message)
                timeout = min(max(message.timeout, 0), self.config.limits.max_timeout)
                self.log.info("shutdown asked by the agent", timeout=timeout)
                self.request_stop(float(timeout), code=CloseCode.NORMAL, reason="shutdown")
            elif mtype in self.host.codec.host_sent:
                raise InvalidMessage(
                    f"{mtype!r} is sent by the host, not by an agent; send a request type "
                    "such as 'chain/req'"
                )
            else:
                plugin = self.host.plugin_for(mtype)
                if plugin is None:
                    raise UnknownType(
                        f"no plugin on this host serves {mtype!r}",
                        detail={"type": mtype},
                    )
                session = self.sessions.check_work(message, plugin.capability)
                ctx = ConnectionContext(self, session, message, plugin.capability)
                await plugin.handle(message, ctx)
        except Exception as exc:
            capability = plugin.capability if plugin is not None else ""
            self._send_error(exc, req_id=message.id, message_type=mtype, capability=capability)

    async def _handshake(self, request: HandshakeRequest) -> None:
        try:
            outcome = self.sessions.receive_handshake(request)
        except RemoteProtocolError:
            raise
        except Exception as exc:  # a plugin's metadata() failed: a bug, not the agent's
            self.log.error("handshake failed inside the host", exc_info=exc)
            self.outbox.send_nowait(
                HandshakeResponse(
                    req_id=request.id,
                    session_id="",
                    ok=False,
                    reason="server_error",
                    max_parallel=self.config.limits.max_parallel,
                )
            )
            return
        if outcome.close:  # auth_failed: answered at this peer's turn, then closed
            self._deadline.cancel()
            delay = self.host.auth_throttle.failure(self.peer, anyio.current_time())
            self.log.info("handshake refused", reason=outcome.response.reason,
                          peer=self.peer, answer_in=round(delay, 3))
            await anyio.sleep(delay)
            self.outbox.send_nowait(outcome.response)
            self.request_stop(0.0, code=CloseCode.POLICY_VIOLATION, reason="auth_failed")
            return
        self.outbox.send_nowait(outcome.response)
        if outcome.session is not None:
            self._deadline.cancel()
            self.log = self.log.bind(session_id=outcome.session.session_id)
            self.log.info(
                "session opened",
                agent_id=request.agent_id,
                granted=sorted(outcome.session.granted),
            )
        else:
            self.log.info("handshake refused", reason=outcome.response.reason)

    def _send_error(
        self, exc: BaseException, *, req_id: str, message_type: str, capability: str = ""
    ) -> None:
        self.outbox.send_nowait(
            self.host.error_message(
                exc, req_id=req_id, message_type=message_type, capability_name=capability,
                log=self.log,
            )
        )

    async def _write_loop(self) -> None:
        while True:
            try:
                frames = await self.outbox.receive_batch()
            except anyio.EndOfStream:
                return
            try:
                await self.transport.send_frames(frames)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                self.drop("the peer stopped receiving")
                return
            self.outbox.batch_sent(len(frames))

    async def _watch_peer(self) -> None:
        await self.transport.wait_peer_gone()
        self.drop("the peer can no longer receive")


def _peer_close_code(transport: Transport) -> int | None:
    """The close code the peer sent when it closed first, None when it sent none (or the
    transport has no close codes)."""
    code = getattr(transport, "peer_close_code", None)
    return code if isinstance(code, int) else None


def _utf8_length(text: str, limit: int) -> int:
    """Byte length of ``text`` as UTF-8, computed only when it may exceed ``limit``."""
    if len(text) * 4 <= limit:
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))

