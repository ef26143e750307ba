"""Dispatch: what a connection does with each decoded message (PROTOCOL.md §2).

Layer: runtime (anyio). The core messages are answered here: ``handshake/req`` through
the session state machine (:class:`~a2e_host.session.ConnectionSession`), ``ping`` and
``shutdown``. Every other type goes to the first plugin, by priority, whose namespace
holds it, after the session checks (:meth:`ConnectionSession.check_work
<a2e_host.session.ConnectionSession.check_work>`); a plugin's ``handle`` gets a
:class:`~a2e_host.runtime.context.ConnectionContext`. Anything raised becomes exactly
one wire ``error`` through the router's single mapping, a stray cancellation out of a
plugin included (:func:`~a2e_host.runtime.cancels.being_cancelled`); only the
connection's own cancellation goes through.

It reads the connection only through :class:`DispatchTarget`, and the host only
through its :class:`~a2e_host.runtime.router.Router`.
"""

from __future__ import annotations

from typing import Any, Protocol

import anyio

from ..exceptions import InvalidMessage, RemoteProtocolError, UnknownType
from ..messages import HandshakeRequest, HandshakeResponse, Message, Ping, Pong, Shutdown
from ..plugin import Plugin
from ..session import ConnectionSession, Session
from ..transports import CloseCode
from .cancels import being_cancelled
from .outbox import Outbox
from .router import Router

__all__ = ["dispatch", "DispatchTarget"]


class DispatchTarget(Protocol):
    """What dispatch needs of a connection (implemented by
    :class:`~a2e_host.runtime.connection.HostConnection`)."""

    router: Router
    sessions: ConnectionSession
    outbox: Outbox
    peer: str

    @property
    def log(self) -> Any: ...

    def request_stop(self, grace: float, *, code: int = ..., reason: str = "") -> None: ...

    def session_opened(self, session: Session) -> None:
        """A handshake succeeded: stop the handshake clock, bind logs to the session."""
        ...

    def stop_handshake_clock(self) -> None: ...

    async def handle(self, plugin: Plugin, message: Message, session: Session) -> None:
        """Hand ``message`` to ``plugin`` with a context for it."""
        ...

    def send_error(
        self, exc: BaseException, *, req_id: str, message_type: str, capability: str = ""
    ) -> None: ...


async def dispatch(conn: DispatchTarget, message: Message) -> None:
    """Answer or route one decoded message; never raises (errors go on the wire), but
    lets the task's own cancellation through."""
    mtype = message.TYPE
    plugin: Plugin | None = None
    try:
        if isinstance(message, HandshakeRequest):
            await _handshake(conn, message)
        elif isinstance(message, Ping):
            conn.sessions.check_core(message)
            conn.outbox.send_nowait(
                Pong(req_id=message.id, uptime_seconds=conn.router.uptime_seconds)
            )
        elif isinstance(message, Shutdown):
            conn.sessions.check_core(message)
            session = conn.sessions.session
            limits = session.limits.effective if session is not None else conn.router.config.limits
            timeout = min(max(message.timeout, 0), limits.max_timeout)
            conn.log.info("shutdown asked by the agent", timeout=timeout)
            conn.request_stop(float(timeout), code=CloseCode.NORMAL, reason="shutdown")
        elif mtype in conn.router.codec.host_sent:
            owner = conn.router.plugin_for(mtype)
            requests = [c.TYPE for c in (owner.message_types if owner else ()) if not c.FROM_HOST]
            example = requests[0] if requests else conn.router.codec.example
            raise InvalidMessage(
                f"{mtype!r} is sent by the host, not by an agent; send a request type "
                f"such as {example!r}"
            )
        else:
            plugin = conn.router.plugin_for(mtype)
            if plugin is None:
                raise UnknownType(
                    f"no plugin on this host serves {mtype!r}",
                    detail={"type": mtype},
                )
            session = conn.sessions.check_work(message, plugin.capability)
            await conn.handle(plugin, message, session)
    except (Exception, anyio.get_cancelled_exc_class()) as exc:
        if not isinstance(exc, Exception) and being_cancelled():
            raise
        capability = plugin.capability if plugin is not None else ""
        conn.send_error(exc, req_id=message.id, message_type=mtype, capability=capability)


async def _handshake(conn: DispatchTarget, request: HandshakeRequest) -> None:
    try:
        outcome = conn.sessions.receive_handshake(request)
    except RemoteProtocolError:
        raise
    except Exception as exc:  # a plugin's metadata() failed: a bug, not the agent's
        conn.log.error("handshake failed inside the host", exc_info=exc)
        conn.outbox.send_nowait(
            HandshakeResponse(
                req_id=request.id,
                session_id="",
                ok=False,
                reason="server_error",
                max_parallel=conn.router.config.limits.max_parallel,
            )
        )
        return
    if outcome.close:  # auth_failed: answered at this peer's turn, then closed
        conn.stop_handshake_clock()
        delay = conn.router.auth_throttle.failure(conn.peer, anyio.current_time())
        conn.log.info("handshake refused", reason=outcome.response.reason,
                      peer=conn.peer, answer_in=round(delay, 3))
        await anyio.sleep(delay)
        conn.outbox.send_nowait(outcome.response)
        conn.request_stop(0.0, code=CloseCode.POLICY_VIOLATION, reason="auth_failed")
        return
    conn.outbox.send_nowait(outcome.response)
    if outcome.session is not None:
        conn.session_opened(outcome.session)
        conn.log.info(
            "session opened",
            agent_id=request.agent_id,
            granted=sorted(outcome.session.granted),
        )
    else:
        conn.log.info("handshake refused", reason=outcome.response.reason)
