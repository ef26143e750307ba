"""The ``runs`` capability: ``run/list`` and ``run/get`` over the host's durable runs
(PROTOCOL.md §5 Durable runs, *Operators*).

A second plugin of the ``a2e_chains`` distribution, registered by its own entry point. It
reads the run store the chains plugin writes (the same :class:`~a2e_chains.durable.
DurableRuns`) and answers only with the session's principal's runs: another principal's
run is ``unknown_run``, exactly like a run that does not exist.
"""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec

from a2e_host.chains.run_messages import (
    MAX_RUN_EVENTS,
    MAX_RUN_LIST,
    RUN_MESSAGE_TYPES,
    RUN_STATUSES,
    RunGet,
    RunGetResponse,
    RunInfo,
    RunList,
    RunListResponse,
)
from a2e_host.exceptions import InvalidMessage, RunExpired, SchemaViolation
from a2e_host.messages import Message
from a2e_host.plugin import Plugin, PluginContext
from a2e_host.store import RunRecord, RunStatus

from .durable_handlers import forget_durable_runs, shared_durable_runs

__all__ = ["RunsPlugin", "run_info"]


class RunsPlugin(Plugin):
    """Lists and fetches the session's principal's durable runs.

    Served when the host has a run store (``--store``); without one the capability is
    still granted and every request is refused with ``store_required``.
    """

    capability: ClassVar[str] = "runs"
    namespace: ClassVar[str] = "run/*"
    priority: ClassVar[int] = 15
    message_types: ClassVar[tuple[type[Message], ...]] = RUN_MESSAGE_TYPES
    features: ClassVar[tuple[str, ...]] = ("run/list", "run/get")
    how_to_serve: ClassVar[str] = "start the host with --store PATH (a run store), or A2E_STORE"
    store: Any = None  # the host's run store, set by the host (Plugin.store)

    async def handle(self, message: Message, ctx: PluginContext) -> None:
        """Answer ``run/list`` with ``run/list/resp`` and ``run/get`` with
        ``run/get/resp``.

        Raises:
            StoreRequired: the host has no run store.
            SchemaViolation: a ``limit`` out of range, an unknown ``status``, a
                negative ``since_seq``.
            InvalidMessage: a ``cursor`` this host did not make, or a message type only
                hosts send.
            UnknownRun / RunExpired: ``run/get`` of no run of this principal, or of one
                whose retention passed (asked with ``events``).
        """
        if isinstance(message, RunList):
            await self._list(message, ctx)
        elif isinstance(message, RunGet):
            await self._get(message, ctx)
        else:
            raise InvalidMessage(
                f"{message.TYPE!r} is sent by hosts, not agents; send run/list or run/get"
            )

    async def _list(self, message: RunList, ctx: PluginContext) -> None:
        if not 1 <= message.limit <= MAX_RUN_LIST:
            raise SchemaViolation(
                f"run/list.limit is {message.limit}; give 1 to {MAX_RUN_LIST}",
                detail={"path": "$.limit", "type": message.TYPE},
            )
        if message.status and message.status not in RUN_STATUSES:
            raise SchemaViolation(
                f"run/list.status {message.status!r} is not a run status; give one of "
                f"{', '.join(RUN_STATUSES)}, or leave it out for all",
                detail={"path": "$.status", "type": message.TYPE},
            )
        store = await shared_durable_runs(self.config, self.store).open()
        try:
            records, cursor = await store.list(
                principal=ctx.session.principal,
                status=RunStatus(message.status) if message.status else None,
                cursor=message.cursor or None,
                limit=message.limit,
            )
        except ValueError:
            raise InvalidMessage(
                f"run/list.cursor {message.cursor!r} is not one this host gave; send the "
                "next_cursor of the previous run/list/resp, or leave it out"
            ) from None
        ctx.outbox.send_nowait(RunListResponse(
            req_id=message.id,
            runs=[run_info(r, with_response=False) for r in records],
            next_cursor=cursor or "",
        ))

    async def _get(self, message: RunGet, ctx: PluginContext) -> None:
        if not 1 <= message.limit <= MAX_RUN_EVENTS:
            raise SchemaViolation(
                f"run/get.limit is {message.limit}; give 1 to {MAX_RUN_EVENTS}",
                detail={"path": "$.limit", "type": message.TYPE},
            )
        if message.since_seq < 0:
            raise SchemaViolation(
                f"run/get.since_seq is {message.since_seq}; give 0 or the last seq seen",
                detail={"path": "$.since_seq", "type": message.TYPE},
            )
        runs = shared_durable_runs(self.config, self.store)
        try:
            found = await runs.find(ctx.session.principal, message.run_id, "")
        except RunExpired:
            if message.events:
                raise
            store = await runs.open()
            record = await store.get(message.run_id)
            assert record is not None  # find() just read it
            found = record
        store = await runs.open()
        record = found if isinstance(found, RunRecord) else await store.get(found.run_id)
        if record is None:  # accepted, not yet committed: nothing to show yet
            record = RunRecord(run_id=found.run_id, principal=ctx.session.principal,
                               req_id=getattr(found, "req_id", ""))
        events: list[Any] = []
        next_since = 0
        if message.events:
            frames = await store.frames(record.run_id, after=message.since_seq,
                                        limit=message.limit)
            events = [msgspec.json.decode(f.frame) for f in frames]
            if len(frames) == message.limit:
                next_since = frames[-1].seq
        ctx.outbox.send_nowait(RunGetResponse(
            req_id=message.id, run=run_info(record, with_response=True), events=events,
            next_since_seq=next_since,
        ))

    async def aclose(self) -> None:
        """The host is stopping: forget its durable runs."""
        forget_durable_runs(self.config)


def run_info(record: RunRecord, *, with_response: bool) -> RunInfo:
    """The wire view of a stored run (``response`` decoded when asked and present)."""
    response = None
    if with_response and record.response is not None:
        response = msgspec.json.decode(record.response)
    return RunInfo(
        run_id=record.run_id,
        req_id=record.req_id,
        chain_id=record.chain_id,
        status=str(record.status),
        created=record.created,
        updated=record.updated,
        last_seq=record.last_seq,
        idempotency_key=record.idempotency_key or "",
        retention_until=record.retention_until or 0.0,
        response=response,
    )
