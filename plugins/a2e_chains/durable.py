"""Durable chains: runs recorded in the host's run store that outlive their connection
(PROTOCOL.md §5 Durable runs).

The chains and runs plugins share one :class:`DurableRuns` per host. It uses the run
store the host opened (``Plugin.store``), starts durable runs with a store-backed sink
(:class:`a2e_host.runtime.durable.DurableSink`: a frame reaches the wire only once its
batch is committed, and a later attach replays the stored frames before the live ones),
finds a principal's runs for ``chain/attach``, ``chain/detach``, ``chain/cancel``,
``run/list`` and ``run/get``, and writes each run's status when it ends.

**Principal.** Every lookup is by ``(principal, id)``: a run of another principal is
answered exactly like a run that does not exist (``unknown_run``), so knowing an id
grants nothing.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Any, cast

import anyio
import msgspec

from a2e_host.chains.messages import ChainAccepted, ChainRequest, ChainResponse, chain_codec
from a2e_host.codec import encode_message
from a2e_host.config import HostConfig
from a2e_host.errors import chain_failure_of
from a2e_host.exceptions import (
    A2EError,
    BadSinceSeq,
    ChainError,
    RunExpired,
    StoreRequired,
    StoreUnavailable,
    UnknownRun,
)
from a2e_host.plugin import PluginContext, RunHandle, SessionInfo
from a2e_host.runtime.durable import DurableSink
from a2e_host.runtime.replay import replay_stored
from a2e_host.runtime.runs import FrameOutbox
from a2e_host.store import RunRecord, RunStatus, RunStore, StoreError

__all__ = ["DurableRuns", "LiveRun", "check_not_expired", "status_of"]

REQ_ID_SEARCH = 1000
"""A run named by ``req_id`` is looked for among the principal's newest this many runs
(bounded work per lookup); older ones are named by ``run_id``."""

FINISH_WAIT = 5.0
"""Seconds a durable run's task waits, at its end, for its status to be committed."""

_STATUS_BY_CODE = {
    "cancelled": RunStatus.CANCELLED,
    "timeout": RunStatus.TIMEOUT,
    "chain_limit": RunStatus.BUDGET_EXHAUSTED,
    "interrupted": RunStatus.INTERRUPTED,
}


def status_of(response: ChainResponse) -> RunStatus:
    """The stored status of a run that ended with ``response``: ``succeeded``, or by its
    error code ``cancelled``, ``timeout``, ``budget_exhausted`` (``chain_limit``: a
    ceiling or request budget), ``interrupted``, else ``failed``."""
    if response.success:
        return RunStatus.SUCCEEDED
    code = response.error.code if response.error is not None else ""
    return _STATUS_BY_CODE.get(code, RunStatus.FAILED)


@dataclass(eq=False)
class LiveRun:
    """A durable run running on this host.

    Attributes:
        run_id / principal / req_id / idempotency_key: as stored.
        handle: the run of the host (attach, cancel).
        sink: its store-backed sink.
        ended: its ``chain/resp`` was sent (``last_seq`` is its last event's ``seq``).
        spawn: ``start_soon`` of the connection attached last (replays run there).
        fingerprint: :func:`request_fingerprint` of its request, for a run with an
            ``idempotency_key`` (the only runs a resubmitted request is compared with);
            ``""``: none (no key, or its stored request is unreadable).
    """

    run_id: str
    principal: str
    req_id: str
    idempotency_key: str
    handle: RunHandle
    sink: DurableSink
    ended: bool = False
    last_seq: int = 0
    spawn: Any = None
    fingerprint: str = ""


def request_fingerprint(request: ChainRequest) -> str:
    """sha256 hex of the work a durable request asks for — its ``nodes``, ``entry_node``
    and ``initial_input`` (not its envelope: ``id``, ``ts``…) — which an
    ``idempotency_key`` names (PROTOCOL.md §5 Durable runs)."""
    body = msgspec.json.encode([request.nodes, request.entry_node, request.initial_input],
                               order="sorted")
    return hashlib.sha256(body).hexdigest()


def stored_fingerprint(record: RunRecord) -> str:
    """:func:`request_fingerprint` of a stored run's request; ``""`` when it is not
    stored (a record listed without bodies) or no longer decodes."""
    if not record.request:
        return ""
    try:
        message = chain_codec.decode(record.request)
    except A2EError:  # a request stored by another version that no longer decodes
        return ""
    return request_fingerprint(message) if isinstance(message, ChainRequest) else ""


class DurableRuns:
    """The host's durable chains (one per chains plugin).

    Args:
        config: the host configuration.
    """

    def __init__(self, config: HostConfig) -> None:
        self.config = config
        self.store: RunStore | None = None
        """Set from the plugins' ``store`` (the host opens and closes it)."""
        self.live: dict[str, LiveRun] = {}
        self._by_key: dict[tuple[str, str], LiveRun] = {}
        self._by_req: dict[tuple[str, str], LiveRun] = {}
        self._held: dict[str, int] = {}  # principal → live runs + runs being started

    @property
    def configured(self) -> bool:
        """Whether the host runs with a run store (``--store``)."""
        return self.store is not None

    async def open(self) -> RunStore:
        """The host's run store.

        Raises:
            StoreRequired: the host has no store configured.
        """
        if self.store is None:
            raise StoreRequired(
                "this host keeps no run store, so it cannot run durable chains; start it "
                "with --store PATH (or A2E_STORE, or [store] path in its config), or send "
                "the chain/req without durable"
            )
        return self.store

    async def writable(self) -> RunStore:
        """The host's run store, when it can record a new run.

        Raises:
            StoreRequired: the host has no store configured.
            StoreUnavailable: the store failed (its writes are refused until a restart).
        """
        store = await self.open()
        if store.error is not None:
            raise _unavailable(store.error)
        return store

    # ── starting ───────────────────────────────────────────────────────────

    def reserve(self, principal: str) -> int:
        """Count one more run of ``principal`` in flight (``max_durable_runs``, §6):
        a run being started, until :meth:`release`, or a live one, until it is
        forgotten. Returns the principal's count with it."""
        held = self._held.get(principal, 0) + 1
        self._held[principal] = held
        return held

    def release(self, principal: str) -> None:
        """Undo one :meth:`reserve` of ``principal``."""
        held = self._held.get(principal, 0) - 1
        if held > 0:
            self._held[principal] = held
        else:
            self._held.pop(principal, None)

    async def existing(self, principal: str, key: str) -> LiveRun | RunRecord | None:
        """The principal's run with ``idempotency_key`` ``key``: live, stored, or None."""
        live = self._by_key.get((principal, key))
        if live is not None:
            return live
        store = await self.open()
        return await store.by_idempotency_key(principal, key)

    async def create(
        self, request: ChainRequest, session: SessionInfo, *, run_seconds: int, retention: int,
        plan_hash: str = "", encoded: bytes | None = None,
    ) -> RunRecord | None:
        """Record a new durable run that may run ``run_seconds`` (its timeout) and is kept
        ``retention`` seconds after it ends; ``plan_hash`` is what a resume compares
        (PROTOCOL.md §5 Resume); ``encoded``: ``request`` encoded already (the plan hash
        is taken over the same bytes), else it is encoded here.

        Returns:
            The new record, or None when the principal's ``idempotency_key`` was taken
            meanwhile (attach to :meth:`existing` instead).

        Raises:
            StoreUnavailable: the store failed; nothing was recorded.
        """
        store = await self.writable()
        now = time.time()
        record = RunRecord(
            run_id=secrets.token_hex(16),
            principal=session.principal,
            req_id=request.id,
            chain_id=request.chain_id,
            request=encode_message(request) if encoded is None else encoded,
            plan_hash=plan_hash,
            deadline=now + run_seconds,
            created=now,
            updated=now,
            idempotency_key=request.idempotency_key or None,
            retention_until=now + retention,  # the store moves it to end + retention
        )
        try:
            if request.idempotency_key:
                stored, created = await store.create_or_get(record)
                return stored if created else None
            store.create(record)
        except StoreError as exc:  # it failed since writable() looked
            raise _unavailable(store.error or exc) from None
        return record

    def started(self, record: RunRecord, handle: RunHandle, sink: DurableSink,
                spawn: Any, request: ChainRequest | None = None) -> LiveRun:
        """List a run just started for lookups by run id, request id and key.

        Args:
            request: the run's request when the caller holds it decoded (its fingerprint
                is then taken from it, not from the stored bytes decoded again).
        """
        fingerprint = ""
        if record.idempotency_key:  # only a run with a key is compared with a resubmit
            fingerprint = (request_fingerprint(request) if request is not None
                           else stored_fingerprint(record))
        live = LiveRun(record.run_id, record.principal, record.req_id,
                       record.idempotency_key or "", handle, sink, spawn=spawn,
                       fingerprint=fingerprint)
        self.live[live.run_id] = live
        self.reserve(live.principal)
        self._by_req[(live.principal, live.req_id)] = live
        if live.idempotency_key:
            self._by_key[(live.principal, live.idempotency_key)] = live
        return live

    def refused(self, record: RunRecord, request: ChainRequest, refusal: A2EError) -> None:
        """A run just recorded is refused before it started (``refusal``, e.g. ``busy``):
        a ``chain/resp`` with its code is stored as the run's ending (status ``failed``,
        no events), so an attach or a resubmitted ``idempotency_key`` replays that
        refusal instead of finding a ``running`` run that nothing runs."""
        store = self.store
        if store is None:
            return
        response = ChainResponse(
            req_id=request.id, chain_id=request.chain_id, success=False, outputs={},
            final_output=None, duration_ms=0, nodes_run=0,
            error=chain_failure_of(ChainError(
                str(refusal), code=refusal.code, retryable=refusal.retryable,
                details=dict(refusal.detail))))
        try:
            store.finish(record.run_id, RunStatus.FAILED, encode_message(response), 0)
        except StoreError:
            pass  # the store logged it, and records nothing more

    def make_sink(self, record: RunRecord, position: int = 0) -> DurableSink:
        """The store-backed sink of a new run (or, with ``position``, of a resumed one
        whose last stored frame is that): the replay an attach behind the live position
        needs runs on the attaching connection (cancelled if it drops)."""
        store = self.store
        assert store is not None  # create() opened it
        run_id = record.run_id

        def start_soon(fn: Any) -> None:
            live = self.live.get(run_id)
            if live is None or live.spawn is None:
                raise RuntimeError(f"durable run {run_id!r} has no attaching connection")
            live.spawn(fn, name=f"replay {run_id}")

        def store_failed(_error: BaseException) -> None:
            # nothing the run does from now on is recorded: stop it rather than let its
            # nodes act unrecorded (a restarted host resumes it from what was stored)
            live = self.live.get(run_id)
            if live is not None:
                live.handle.cancel()

        return DurableSink(store, run_id, req_id=record.req_id, capability="chains",
                           start_soon=start_soon, position=position,
                           on_store_error=store_failed)

    def host_stops(self, live: LiveRun) -> bool:
        """Whether the run is ending only because the host is stopping (it cancels every
        run) with no ``chain/cancel`` asked. What it emits then (its running nodes'
        ``error`` events, its ``chain/resp``) is neither stored nor sent: the run stays
        ``running`` in the store as its log left it, for a restarted host to resume as
        after a crash (PROTOCOL.md §5 Durable runs)."""
        handle = live.handle
        stops = handle.host_stopping and not handle.cancel_requested
        if stops and not live.ended:
            live.ended = True
            live.last_seq = live.sink.position
        return stops

    def finished(self, live: LiveRun, response: ChainResponse) -> None:
        """The run's ``chain/resp`` is being sent: stored as its response with its status
        (the sink queues both, and sends the frame once they are committed)."""
        live.ended = True
        live.last_seq = live.sink.position
        live.sink.send_nowait(response, status=status_of(response))

    async def ended(self, live: LiveRun) -> None:
        """The run's task is ending: once its end is committed (bounded, shielded),
        forget it, so later lookups read the store and find it finished."""
        store = self.store
        with anyio.CancelScope(shield=True), anyio.move_on_after(FINISH_WAIT):
            if store is not None:
                try:
                    await store.flush()
                except StoreError:
                    pass  # the sink told the attached connection; the store logged it
        self.forget(live)

    def forget(self, live: LiveRun) -> None:
        """The run's task ended: later lookups read the store."""
        if self.live.get(live.run_id) is live:
            del self.live[live.run_id]
            self.release(live.principal)
        if self._by_req.get((live.principal, live.req_id)) is live:
            del self._by_req[(live.principal, live.req_id)]
        if self._by_key.get((live.principal, live.idempotency_key)) is live:
            del self._by_key[(live.principal, live.idempotency_key)]

    def cancel(self, live: LiveRun) -> None:
        """Cancel a live run, its ``chain/cancel`` recorded first (``cancel_requested``),
        so a host killed before the cancelled ``chain/resp`` commits does not resume it.
        A broken store does not fail the cancel: the run still stops."""
        store = self.store
        if store is not None:
            try:
                store.request_cancel(live.run_id)
            except StoreError:
                pass  # nothing more is stored; the run is stopped all the same
        live.handle.cancel()

    # ── finding ────────────────────────────────────────────────────────────

    def live_by_req(self, principal: str, req_id: str) -> LiveRun | None:
        """The principal's run in flight on this host serving ``req_id``, else None."""
        return self._by_req.get((principal, req_id))

    async def find(self, principal: str, run_id: str, req_id: str) -> LiveRun | RunRecord:
        """The principal's run named by ``run_id`` (or, when empty, ``req_id``).

        Raises:
            UnknownRun: no such run of this principal (another principal's included).
            RunExpired: its retention passed.
            StoreRequired: the host has no store.
        """
        what = f"run_id {run_id!r}" if run_id else f"req_id {req_id!r}"
        if not run_id and not req_id:
            raise UnknownRun("name the run: give run_id (from chain/accepted) or req_id")
        live = self.live.get(run_id) if run_id else self._by_req.get((principal, req_id))
        if live is not None and live.principal == principal:
            return live
        store = await self.open()
        record: RunRecord | None
        searched_all = True
        if run_id:
            record = await store.get(run_id)
        else:
            record, searched_all = await _newest_with_req_id(store, principal, req_id)
        if record is None or record.principal != principal:
            if not searched_all:
                raise UnknownRun(
                    f"no durable run with {what} among the {REQ_ID_SEARCH} newest runs "
                    "of this session's principal; name an older run by its run_id "
                    "(run/list lists them)"
                )
            raise UnknownRun(
                f"no durable run with {what} for this session's principal; list yours "
                "with run/list"
            )
        check_not_expired(record)
        return record

    # ── attaching ──────────────────────────────────────────────────────────

    def attach_live(self, live: LiveRun, ctx: PluginContext, since_seq: int,
                    attach_id: str) -> None:
        """``chain/accepted``, then the run's frames after ``since_seq`` on this
        connection (stored, then live: the sink replays before it releases new ones).

        Raises:
            BadSinceSeq: ``since_seq`` is negative or past the run's last event.
        """
        last = _last_seq(live)
        _check_since(since_seq, last, live.run_id)
        ctx.outbox.send_nowait(ChainAccepted(req_id=live.req_id, run_id=live.run_id,
                                             last_seq=last, attach_id=attach_id))
        if not live.sink.attached_to(ctx.outbox):
            # taken over: it no longer counts against the max_parallel of the session
            # that started it (max_durable_runs still counts it)
            live.handle.release()
        live.spawn = ctx.start_soon
        ctx.attach_run(live.handle, after=since_seq)

    async def replay(self, record: RunRecord, ctx: PluginContext, since_seq: int,
                     attach_id: str) -> None:
        """``chain/accepted``, then a finished run's stored frames after ``since_seq`` and
        its stored ``chain/resp``, on this connection, with backpressure: in a task of
        the connection, so a slow reader of a long replay never holds up the messages
        that follow the attach (a store failure is sent as an ``error`` to the attach).

        Raises:
            BadSinceSeq: ``since_seq`` is negative or past the run's last event.
        """
        _check_since(since_seq, record.last_seq, record.run_id)
        store = await self.open()
        ctx.outbox.send_nowait(ChainAccepted(req_id=record.req_id, run_id=record.run_id,
                                             last_seq=record.last_seq, attach_id=attach_id))
        outbox = cast(FrameOutbox, ctx.outbox)

        async def replay() -> None:
            await replay_stored(store, record.run_id, outbox, after=since_seq)

        ctx.start_soon(replay, name=f"replay {record.run_id}")


def check_not_expired(record: RunRecord) -> None:
    """Raises:
        RunExpired: the run's retention passed and its events were pruned.
    """
    if record.status is RunStatus.EXPIRED:
        raise RunExpired(
            f"durable run {record.run_id!r} ended and its retention passed: its events "
            "are gone (ask a longer chain/req.retention next time)",
            detail={"run_id": record.run_id},
        )


def _unavailable(cause: BaseException) -> StoreUnavailable:
    return StoreUnavailable(
        f"this host's run store failed ({cause}) and records no durable run until the "
        "host is restarted; send the chain/req without durable, or again later"
    )


def _check_since(since_seq: int, last: int, run_id: str) -> None:
    if not 0 <= since_seq <= last:
        raise BadSinceSeq(
            f"since_seq {since_seq} is outside durable run {run_id!r}, whose events are "
            f"seq 1..{last}; send the last seq you received, or 0 for every event",
            detail={"since_seq": since_seq, "last_seq": last},
        )


def _last_seq(live: LiveRun) -> int:
    """The last event ``seq`` of a run on this host that is committed: a client is never
    told of a ``seq`` a crash could take back (PROTOCOL.md §5 Durable runs)."""
    committed = live.sink.committed_position
    return min(live.last_seq, committed) if live.ended else committed


async def _newest_with_req_id(store: RunStore, principal: str, req_id: str
                              ) -> tuple[RunRecord | None, bool]:
    """The principal's newest stored run serving ``req_id`` among its
    :data:`REQ_ID_SEARCH` newest runs, and whether those were all its runs."""
    cursor: str | None = None
    for _ in range(REQ_ID_SEARCH // 500):
        records, cursor = await store.list(principal=principal, cursor=cursor, limit=500)
        for record in records:
            if record.req_id == req_id:
                return record, True
        if cursor is None:
            return None, True
    return None, False

