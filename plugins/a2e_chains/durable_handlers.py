"""The chains plugin's durable-run messages: a durable ``chain/req``, ``chain/attach``,
``chain/detach`` and the principal-wide ``chain/cancel`` (PROTOCOL.md §5 Durable runs).

A mixin of :class:`a2e_chains.ChainPlugin`, kept apart so the plain chain path reads as
it did; every lookup goes through :class:`~a2e_chains.durable.DurableRuns` by the
session's principal.
"""

from __future__ import annotations

import time
from typing import Any

import anyio

from a2e_host.chains.messages import (
    DEFAULT_RETENTION,
    ChainAccepted,
    ChainAttach,
    ChainCancel,
    ChainDetach,
    ChainDetached,
    ChainRequest,
)
from a2e_host.codec import encode_message
from a2e_host.config import HostConfig
from a2e_host.exceptions import (
    A2EError,
    Busy,
    ChainInvalid,
    IdempotencyConflict,
    InvalidMessage,
    UnknownRun,
)
from a2e_host.plugin import PluginContext
from a2e_host.store import RunRecord, RunStatus

from .durable import (
    DurableRuns,
    LiveRun,
    check_not_expired,
    request_fingerprint,
    stored_fingerprint,
)
from .replicas import TAILS, shared_store

__all__ = ["DurableChains", "durable_runs_for", "forget_durable_runs", "shared_durable_runs"]

_SHARED: dict[int, tuple[HostConfig, DurableRuns]] = {}


def durable_runs_for(config: HostConfig) -> DurableRuns:
    """The one :class:`DurableRuns` of the host configured by ``config`` (shared by the
    chains and runs plugins, which the host builds with the same configuration)."""
    entry = _SHARED.get(id(config))
    if entry is None or entry[0] is not config:
        entry = (config, DurableRuns(config))
        _SHARED[id(config)] = entry
    return entry[1]


def shared_durable_runs(config: HostConfig, store: Any) -> DurableRuns:
    """:func:`durable_runs_for` with the host's run store (``Plugin.store``) set."""
    runs = durable_runs_for(config)
    runs.store = store
    return runs


def forget_durable_runs(config: HostConfig) -> None:
    """The host is stopping: forget its durable runs (the host closes the store)."""
    entry = _SHARED.get(id(config))
    if entry is not None and entry[0] is config:
        del _SHARED[id(config)]


class DurableChains:
    """What :class:`a2e_chains.ChainPlugin` does for durable runs (a mixin)."""

    config: HostConfig
    store: Any = None  # the host's run store, set by the host (Plugin.store)

    @property
    def durable(self) -> DurableRuns:
        """The host's durable runs, over the store the host gave the plugin."""
        return shared_durable_runs(self.config, self.store)

    async def _start_durable(self, request: ChainRequest, ctx: PluginContext) -> None:
        """Accept a durable ``chain/req``: refuse it without a store, attach to the
        principal's run with its ``idempotency_key``, or record and start a new run
        (``chain/accepted`` first)."""
        session = ctx.session
        durable = self.durable
        await durable.open()  # StoreRequired, before anything else is said
        refusal_nul = _nul_refusal(request, session.principal)
        if refusal_nul is not None:
            ctx.outbox.send_nowait(self._refused(request, refusal_nul))  # type: ignore[attr-defined]
            return
        if request.idempotency_key:
            existing = await durable.existing(session.principal, request.idempotency_key)
            if existing is not None:
                _same_request(existing, request)
                await self._attach_found(existing, ctx, 0, request.id)
                return
        effective = session.limits.effective
        default = int(getattr(self.config, "store_retention", DEFAULT_RETENTION))
        retention = request.retention or min(default, effective.max_retention)
        refusal: Exception | None = session.limits.refusal("max_retention", retention)
        if request.retention < 0:
            refusal = _invalid_retention(request.retention)
        if refusal is not None:
            ctx.outbox.send_nowait(self._refused(request, refusal))  # type: ignore[attr-defined]
            return
        # the principal's runs in flight, this one included, counted before the store
        # is awaited: concurrent requests from its other connections see each other
        held = durable.reserve(session.principal)
        try:
            refusal = session.limits.refusal("max_durable_runs", held)
            if refusal is not None:
                ctx.outbox.send_nowait(self._refused(request, refusal))  # type: ignore[attr-defined]
                return
            await self._create_and_start(request, ctx, retention)
        finally:
            durable.release(session.principal)

    async def _create_and_start(self, request: ChainRequest, ctx: PluginContext,
                                retention: int) -> None:
        session = ctx.session
        durable = self.durable
        effective = session.limits.effective
        self._check_admission(request, ctx)  # type: ignore[attr-defined]
        timeout = min(request.timeout_within(effective.max_timeout), effective.max_timeout)
        # shielded from the create to started(): a record the store commits always gets
        # its task or its ending, even when this connection drops meanwhile
        encoded = encode_message(request)  # once: stored, and what the plan hash covers
        with anyio.CancelScope(shield=True):
            record = await durable.create(
                request, session, run_seconds=timeout, retention=retention,
                plan_hash=self._plan_hash(request, encoded),  # type: ignore[attr-defined]
                encoded=encoded)
            if record is not None:
                try:
                    self._check_admission(request, ctx)  # type: ignore[attr-defined]
                except A2EError as exc:  # stored as the run's ending: a resubmit replays it
                    durable.refused(record, request, exc)
                    raise
                sink = durable.make_sink(record)
                ctx.outbox.send_nowait(ChainAccepted(req_id=request.id, run_id=record.run_id))
                handle = ctx.start_run(
                    self._run, request, session, ctx.log.bind(run_id=record.run_id),  # type: ignore[attr-defined]
                    time.monotonic(), record.run_id, name=f"durable chain {request.id}",
                    sink=sink,
                )
                durable.started(record, handle, sink, ctx.start_soon, request)
                return
        # the key was taken meanwhile: attach to that run
        existing = await durable.existing(session.principal, request.idempotency_key)
        if existing is None:
            raise UnknownRun("the run with this idempotency_key vanished; send again")
        _same_request(existing, request)
        await self._attach_found(existing, ctx, 0, request.id)

    async def _attach(self, message: ChainAttach, ctx: PluginContext) -> None:
        """``chain/attach``: stream the principal's run here from ``since_seq``."""
        found = await self.durable.find(ctx.session.principal, message.run_id,
                                        message.req_id)
        await self._attach_found(found, ctx, message.since_seq, message.id)

    async def _attach_found(self, found: LiveRun | RunRecord, ctx: PluginContext,
                            since_seq: int, attach_id: str) -> None:
        durable = self.durable
        if isinstance(found, RunRecord):
            check_not_expired(found)  # a resubmitted key of an expired run
            shared = shared_store(durable.store)
            if found.status is RunStatus.RUNNING and shared is not None:
                TAILS.attach(shared, found, ctx, since_seq, attach_id)  # another replica's
                return
            if found.status is RunStatus.RUNNING:
                raise Busy(
                    f"durable run {found.run_id!r} is stored as running but no task on "
                    "this host runs it yet (it is being started or resumed, or the host is "
                    "stopping); attach again in a moment",
                    detail={"run_id": found.run_id},
                )
        if isinstance(found, LiveRun):
            durable.attach_live(found, ctx, since_seq, attach_id)
        else:
            await durable.replay(found, ctx, since_seq, attach_id)

    async def _detach(self, message: ChainDetach, ctx: PluginContext) -> None:
        """``chain/detach``: stop streaming the run here; it runs on."""
        found = await self.durable.find(ctx.session.principal, message.run_id,
                                        message.req_id)
        if not isinstance(found, LiveRun) and TAILS.detach(ctx, found.run_id, message.id):
            return
        if not isinstance(found, LiveRun) or not ctx.detach_run(found.handle):
            raise InvalidMessage(
                f"durable run {_run_id(found)!r} is not streaming to this connection; "
                "nothing to detach"
            )
        found.handle.release()  # no longer one of this session's max_parallel chains
        ctx.outbox.send_nowait(ChainDetached(req_id=message.id, run_id=found.run_id,
                                             last_seq=found.sink.delivered))

    async def _cancel_durable(self, message: ChainCancel, ctx: PluginContext) -> bool:
        """``chain/cancel`` of a durable run of the session's principal, by ``run_id``
        or by a ``req_id`` not in flight on this session.

        Returns:
            False when there is no such run and the message named no ``run_id`` (the
            caller answers as before).
        """
        durable = self.durable
        found: LiveRun | RunRecord | None
        if message.run_id:
            found = await durable.find(ctx.session.principal, message.run_id, "")
        else:  # only a run in flight can be cancelled: no store read for a stray req_id
            found = durable.live_by_req(ctx.session.principal, message.req_id)
            if found is None and shared_store(durable.store) is not None:
                try:  # replicas: it may run on another one
                    found = await durable.find(ctx.session.principal, "", message.req_id)
                except UnknownRun:
                    return False
            if found is None:
                return False
        shared = shared_store(durable.store)
        if isinstance(found, RunRecord) and found.status is RunStatus.RUNNING and shared:
            shared.request_cancel(found.run_id)  # its owner stops it (NOTIFY, heartbeat)
            return True
        if not isinstance(found, LiveRun) or found.ended:
            raise InvalidMessage(
                f"durable run {_run_id(found)!r} has ended already; nothing to cancel"
            )
        durable.cancel(found)
        return True


def _run_id(found: LiveRun | RunRecord) -> str:
    return found.run_id


def _invalid_retention(retention: int) -> ChainInvalid:
    message = f"retention must be positive seconds, got {retention}"
    problem = {"code": "chain_invalid", "node_id": "", "field": "retention",
               "message": message,
               "hint": "set 'retention' to a number of seconds above 0, or leave it out for "
                       "the host's default"}
    return ChainInvalid(message, details={"errors": [problem]})


def _nul_refusal(request: ChainRequest, principal: str) -> ChainInvalid | None:
    """Refuse a durable request holding a NUL character in a string the run store keeps
    as text (a database text column cannot hold one), or None."""
    fields = [("", "id", request.id), ("", "chain_id", request.chain_id),
              ("", "idempotency_key", request.idempotency_key)]
    if any("\x00" in node.node_id for node in request.nodes):  # no tuple per node
        fields += [(node.node_id, "node_id", node.node_id) for node in request.nodes]
    for node_id, field, value in fields:
        if "\x00" in value:
            message = (f"field {field} contains a NUL character; remove it (a durable run's "
                       "id, chain_id, idempotency_key and node ids are stored as text)")
            problem = {"code": "chain_invalid", "node_id": node_id.replace("\x00", ""),
                       "field": field, "message": message,
                       "hint": "remove the NUL (\\u0000) character from the field"}
            return ChainInvalid(message, details={"errors": [problem]})
    if "\x00" in principal:
        return ChainInvalid("the session's principal contains a NUL character; a durable "
                            "run cannot be stored under it: authenticate as another "
                            "principal", details={"errors": [{
                                "code": "chain_invalid", "node_id": "", "field": "principal",
                                "message": "the principal contains a NUL character",
                                "hint": "use a principal without NUL characters"}]})
    return None


def _same_request(found: LiveRun | RunRecord, request: ChainRequest) -> None:
    """Refuse a resubmitted ``idempotency_key`` whose request asks for other work than
    the run the key names (PROTOCOL.md §5 Durable runs); the same work attaches.

    Raises:
        IdempotencyConflict: its ``nodes``, ``entry_node`` or ``initial_input`` differ.
    """
    stored = found.fingerprint if isinstance(found, LiveRun) else stored_fingerprint(found)
    if stored and stored != request_fingerprint(request):
        raise IdempotencyConflict(
            f"idempotency_key {request.idempotency_key!r} already names run {found.run_id}, "
            "which was sent with other nodes, entry_node or initial_input; send this "
            "request with a fresh idempotency_key (or resend the original request "
            "unchanged to attach to that run)",
            detail={"idempotency_key": request.idempotency_key, "run_id": found.run_id},
        )
