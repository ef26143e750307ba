"""One connection at run time: its tasks and how it ends.

Layer: runtime (anyio). Every transport (memory, stdio, WebSocket) goes through
:class:`HostConnection`: the same decode (:mod:`.decode`), session checks and routing
(:mod:`.dispatch`) and error mapping. It knows its host only through a
:class:`~a2e_host.runtime.router.Router`; it must not import the host module.

Tasks, in one task group per connection:

- the **reader** takes frames from the transport, decodes them and dispatches each in
  turn (core messages answered, the rest to their plugin's ``handle``, which must return
  quickly: long work goes to ``ctx.start_run`` / ``ctx.start_soon``);
- the **writer** drains the :class:`~a2e_host.runtime.outbox.Outbox` to the transport;
- a **watcher** notices a peer that is gone while we are not reading (stdout closed).

Work a plugin starts is a *run* of the host (:mod:`a2e_host.runtime.runs`), in the
host's task group, not the connection's: the connection attaches each run's sink to its
outbox when it starts it, tracks it for draining, and detaches it when it ends, which
cancels it (:attr:`~a2e_host.runtime.runs.DetachPolicy.CANCEL`), or leaves a durable
one running (:attr:`~a2e_host.runtime.runs.DetachPolicy.KEEP`), which any connection may
attach to later (:meth:`HostConnection.attach_run`).

How a connection ends:

=====================  =============================================================
cause                  what happens
=====================  =============================================================
peer gone              (WS closed, memory client closed, stdout closed) every run is
                       detached (so cancelled) and every task cancelled at once, then
                       plugins are told (``session_closed``) once the runs ended or
                       :data:`CANCEL_GRACE` passed, whichever is first
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

import math
from collections.abc import Awaitable, Callable
from itertools import count
from typing import Any

import anyio

from ..exceptions import HandshakeRequired
from ..messages import Message
from ..plugin import Plugin, SessionInfo
from ..session import ConnectionSession, Session
from ..transports import CloseCode, Incoming, Transport
from .context import ConnectionContext
from .decode import decode_frame
from .dispatch import dispatch
from .outbox import Outbox
from .router import Router
from .runs import DetachPolicy, Run, RunSink, SessionRuns

__all__ = ["HostConnection", "CANCEL_GRACE", "FLUSH_TIMEOUT"]

CANCEL_GRACE = 5.0
"""Seconds cancelled work gets to send its final frames before the connection closes."""

PRE_HANDSHAKE_MAX_MESSAGE_BYTES = 1024 * 1024
"""Bytes a message may have before a session exists (PROTOCOL.md §6): decoding a 16 MiB
frame takes the event loop ~0.6 s (1 MiB: ~40 ms), and a peer that has not yet shown who
it is must not cost the other sessions that."""

FLUSH_TIMEOUT = 5.0
"""Seconds the writer gets to flush queued frames at close."""

_conn_ids = count(1)


class HostConnection:
    """Serves one transport connection until it ends (see the module docstring).

    Args:
        router: what the connection needs of its host (plugins, config, error mapping).
        transport: the connection's frames.
        conn_id: a name for logs; ``c<n>`` when empty.
    """

    def __init__(self, router: Router, transport: Transport, conn_id: str = "") -> None:
        self.router = router
        self.config = router.config
        self.transport = transport
        self.conn_id = conn_id or f"c{next(_conn_ids)}"
        self.log = router.log.bind(conn_id=self.conn_id, transport=transport.kind)
        self.outbox = Outbox(
            self.config.outbox_high_water, self.config.outbox_high_water_bytes
        )
        self.sessions = ConnectionSession(
            self.config,
            router.served,
            gates=router.gates,
            how_to_serve=router.how_to_serve,
            bearer_token=transport.bearer_token,
        )
        self.peer = transport.peer or transport.kind
        self._tg: anyio.abc.TaskGroup | None = None
        self._runs: set[Run] = set()  # runs attached to this connection
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
        """Serve until the connection ends. On return its tasks have ended, so have the
        runs it started (waited for at most :data:`CANCEL_GRACE`: a run ignoring its
        cancel, e.g. in a worker thread, may outlive it), the plugins were told the
        session closed, and the transport is closed; each of these steps has its own
        bound, so none is skipped because another took long."""
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
                    session = self.session
                    if session is not None:
                        await self.router.session_closing(session, self.log,
                                                          grace=CANCEL_GRACE)
                    await self._drain()
                tg.cancel_scope.cancel()
        finally:
            self.sessions.close()
            self.outbox.close()
            with anyio.CancelScope(shield=True):
                await self._end_runs()
                session = self.session
                if session is not None:
                    await self.router.session_closed(session, self.log, grace=CANCEL_GRACE)
                with anyio.move_on_after(FLUSH_TIMEOUT) as closing:
                    await self.transport.aclose(self._close_code, self._close_reason)
                if closing.cancelled_caught:
                    self.log.warning("the transport did not close in time; left to the "
                                     "peer", timeout=FLUSH_TIMEOUT)
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
            self.send_error(
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
        """Orderly end: let runs finish within the grace period, cancel the rest (their
        last frames are still sent), flush."""
        if self._runs:
            self.log.info(
                "waiting for work in flight",
                tasks=len(self._runs),
                grace=self._grace if math.isfinite(self._grace) else None,
            )
            with anyio.move_on_after(self._grace) as self._grace_scope:
                await self._wait_idle()
            if self._runs:
                self.log.info("cancelling work past the grace period", tasks=len(self._runs))
                for run in list(self._runs):
                    if run.policy is DetachPolicy.KEEP:  # durable: it runs on, detached
                        run.detach(self.outbox)
                        self._run_ended(run)
                    else:
                        run.abort()
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
        """The peer is gone: detach every run (cancelling it, as its policy says) and
        cancel the connection's own tasks, now."""
        if not self._dropped:
            self.log.info("peer gone; cancelling the connection's work", why=why)
        self._dropped = True
        self.sessions.stop()
        self._stop.set()
        for run in list(self._runs):
            run.detach(self.outbox)
        if self._tg is not None:
            self._tg.cancel_scope.cancel()

    # ── runs ───────────────────────────────────────────────────────────────

    def start_run(
        self,
        fn: Callable[..., Awaitable[Any]],
        args: tuple[Any, ...],
        *,
        name: str,
        req_id: str,
        capability: str,
        listed: bool,
        policy: DetachPolicy = DetachPolicy.CANCEL,
        sink: RunSink | None = None,
    ) -> Run:
        """Start ``fn(run, *args)`` as a run of the host, attached to this connection
        (tracked for draining, detached when the connection ends).

        Args:
            listed: list it under ``(session_id, req_id)`` (``ctx.start_run``), or not
                (``ctx.start_soon``).
            policy: what the connection ending does to it (KEEP: a durable run).
            sink: its sink when not a plain one (a durable run's).

        Raises:
            RuntimeError: the connection has no session, or the host is not running.
            ValueError: ``listed`` and a run is listed under that key already.
        """
        session = self.session
        if session is None:
            raise RuntimeError("runs start only on a handshaken connection")
        run = self.router.runs.start(
            fn, *args,
            key=(session.session_id, req_id) if listed else None,
            req_id=req_id,
            capability=capability,
            name=name,
            log=self.log.bind(req_id=req_id),
            policy=policy,
            sink=sink,
        )
        self._track(run)
        return run

    def attach_run(self, run: Run, after: int | None) -> None:
        """Attach ``run`` (a durable one, started anywhere) to this connection, taking it
        over from the connection it is attached to, if any; its frames after position
        ``after`` follow (PROTOCOL.md §5 Durable runs).

        Raises:
            RuntimeError: the run cannot be taken over (not durable).
            ValueError: ``after`` asks for frames the run's sink does not keep.
        """
        self._track(run, after=after, take_over=True)

    def detach_run(self, run: Run) -> bool:
        """Stop sending ``run``'s frames here, without cancelling it (``chain/detach``).

        Returns:
            False when it was not attached to this connection.
        """
        if run not in self._runs or not run.sink.attached_to(self.outbox):
            return False
        run.sink.detach()
        self._run_ended(run)
        return True

    def _track(self, run: Run, *, after: int | None = None, take_over: bool = False) -> None:
        run.attach(self.outbox, after=after, on_end=self._run_ended, take_over=take_over)
        self._runs.add(run)
        if self._idle.is_set():
            self._idle = anyio.Event()

    def _run_ended(self, run: Run) -> None:
        self._runs.discard(run)
        if not self._runs:
            self._idle.set()

    async def _wait_idle(self) -> None:
        while self._runs:
            await self._idle.wait()

    async def _end_runs(self) -> None:
        """The connection is over: detach every run still attached, and wait at most
        :data:`CANCEL_GRACE` for those that detaching cancelled. A run still going then
        (its body ignores the cancel: a worker thread, a shielded wait) is logged and
        left to end on its own, in the host's task group."""
        cancelled = [run for run in list(self._runs) if run.detach(self.outbox)]
        self._runs.clear()
        self._idle.set()
        with anyio.move_on_after(CANCEL_GRACE):
            for run in cancelled:
                await run.done.wait()
        alive = [run.name or run.req_id for run in cancelled if not run.done.is_set()]
        if alive:
            self.log.warning("runs outlive their connection: they ignored the cancel for "
                             "the grace period and end on their own", runs=alive[:10],
                             count=len(alive), grace=CANCEL_GRACE)

    def runs_of(self, session: SessionInfo, capability: str) -> SessionRuns:
        """``ctx.runs``: one session's runs in flight of one capability."""
        return self.router.runs.view(session.session_id, capability)

    # ── what dispatch and contexts use (DispatchTarget, ContextOwner) ─────────

    def session_opened(self, session: Session) -> None:
        """A handshake succeeded: stop the handshake clock, bind logs to the session."""
        self._deadline.cancel()
        self.log = self.log.bind(session_id=session.session_id)

    def stop_handshake_clock(self) -> None:
        """A handshake failed authentication: its answer waits its turn in the throttle
        instead of the handshake deadline."""
        self._deadline.cancel()

    async def handle(self, plugin: Plugin, message: Message, session: Session) -> None:
        """Hand ``message`` to ``plugin`` with a context for it."""
        await plugin.handle(message, ConnectionContext(self, session, message, plugin.capability))

    def send_error(
        self, exc: BaseException, *, req_id: str, message_type: str, capability: str = ""
    ) -> None:
        """Queue the wire ``error`` for ``exc`` (the router's one mapping)."""
        self.outbox.send_nowait(
            self.router.error_message(
                exc, req_id=req_id, message_type=message_type, capability_name=capability,
                log=self.log,
            )
        )

    # ── reader, writer, watcher ───────────────────────────────────────────

    async def _read_loop(self) -> None:
        while True:
            if self.outbox.flooded:  # a peer that writes and never reads: its replies
                await self.outbox.wait_writable()  # (pongs, errors) must not grow unbounded
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
        session = self.session
        name = "max_message_bytes"
        if session is not None:
            limit = session.limits.effective.max_message_bytes
        else:  # nobody has proved who they are yet: a handshake/req is small
            limit = self.config.limits.max_message_bytes
            if limit > PRE_HANDSHAKE_MAX_MESSAGE_BYTES:
                limit, name = PRE_HANDSHAKE_MAX_MESSAGE_BYTES, "the limit before a handshake"
        try:
            message = decode_frame(self.router.codec, frame, limit, name)
        except Exception as exc:  # the refusal names its own req_id when it read one
            self.send_error(exc, req_id="", message_type="")
            return
        await dispatch(self, message)

    async def _write_loop(self) -> None:
        while True:
            try:  # up to the high-water mark at once: a burst of events costs a few turns
                frames = await self.outbox.receive_batch(self.outbox.high_water)
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

