"""What both run stores do alike on the event loop: the state of their write queue, the
stamping of a new record, the writes that are one queued op, and the reads (committed
data only) over their queries module.

Layer: store backend (no anyio, no database driver). A mixin of
:class:`~a2e_host.store.sqlite.SQLiteRunStore` and
:class:`~a2e_host.store.postgres.PostgresRunStore`: each provides ``_put`` (queue one
op, return its ticket), ``_read`` (run one function of its queries module on a reading
connection, awaited) and ``_queries`` (:mod:`._queries` or :mod:`._pg_queries`, which
name their functions alike).
"""

from __future__ import annotations

import builtins
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from types import ModuleType
from typing import Any, ClassVar

import msgspec

from . import TERMINAL_STATUSES, FrameItem, RunRecord, RunStatus, StoredFrame
from ._writer import CANCEL, FINISH

__all__ = ["LoopSide", "frame_bytes"]


def frame_bytes(items: list[FrameItem]) -> int:
    """The frame and output bytes of ``items`` (what a store's byte ceiling counts)."""
    return sum(len(item[2]) if item[3] is None else len(item[2]) + len(item[3])
               for item in items)


class LoopSide(ABC):
    """The loop side both stores share (see the module docstring); the attributes are
    the store's own (:class:`~a2e_host.store.RunStore`)."""

    owner: str
    max_pending: int
    max_pending_bytes: int
    committed: int
    pending_bytes: int
    _ticket: int
    _queries: ClassVar[ModuleType]
    _read: Callable[[Callable[[Any], Any]], Awaitable[Any]]
    """``await _read(fn)``: ``fn(conn)`` (a result, or an awaitable of it) on a reading
    connection; raises :class:`~a2e_host.store.StoreError` when the read fails or the
    store is closed."""

    @abstractmethod
    def _put(self, op_kind: int, nbytes: int, *args: Any) -> int:
        """Queue one op of ``nbytes`` frame and output bytes; its ticket."""

    # ── state ───────────────────────────────────────────────────────────────

    @property
    def pending(self) -> int:
        return self._ticket - self.committed

    full: bool
    """Writes or their bytes queued over a ceiling: an attribute, kept by
    :meth:`_count_pending` (asked before every node of a durable run)."""

    _deferred: list[Callable[[], object]]
    """The flushes :meth:`~a2e_host.store.RunStore.defer` was given, not yet called."""
    log: Any

    def _run_deferred(self) -> None:
        """Call the deferred flushes (on the loop; their appends join the queue)."""
        while self._deferred:
            deferred, self._deferred = self._deferred, []
            for flush in deferred:
                try:
                    flush()
                except Exception as exc:  # noqa: BLE001 — one producer's bug, logged
                    self.log.error("a deferred store write failed", exc_info=exc)

    def _count_pending(self) -> None:
        """Set :attr:`full` after a write was queued or a batch committed."""
        self.full = (self._ticket - self.committed > self.max_pending
                     or self.pending_bytes > self.max_pending_bytes)

    # ── writes ──────────────────────────────────────────────────────────────

    def _stamped(self, record: RunRecord) -> RunRecord:
        """``record`` with this store's owner and the current time where it has none."""
        now = time.time()
        changes: dict[str, Any] = {}
        if not record.owner:
            changes["owner"] = self.owner
        if not record.created:
            changes["created"] = now
        if not record.updated:
            changes["updated"] = record.created or now
        return msgspec.structs.replace(record, **changes) if changes else record

    def finish(self, run_id: str, status: RunStatus, response: bytes, last_seq: int) -> int:
        if status not in TERMINAL_STATUSES:
            raise ValueError(f"a run finishes with one of {sorted(TERMINAL_STATUSES)}, "
                             f"not {status!r}")
        return self._put(FINISH, len(response), run_id, str(status.value), response,
                         last_seq, time.time())

    def request_cancel(self, run_id: str) -> int:
        return self._put(CANCEL, 0, run_id, time.time())

    # ── reads: committed data only ──────────────────────────────────────────

    async def get(self, run_id: str) -> RunRecord | None:
        q = self._queries
        found: RunRecord | None = await self._read(lambda conn: q.get(conn, run_id))
        return found

    async def by_idempotency_key(self, principal: str, key: str) -> RunRecord | None:
        q = self._queries
        found: RunRecord | None = await self._read(
            lambda conn: q.by_idempotency_key(conn, principal, key))
        return found

    async def list(
        self,
        *,
        principal: str | None = None,
        status: RunStatus | Sequence[RunStatus] | None = None,
        cursor: str | None = None,
        limit: int = 50,
    ) -> tuple[builtins.list[RunRecord], str | None]:
        statuses: builtins.list[str] | None
        if status is None:
            statuses = None
        elif isinstance(status, RunStatus):
            statuses = [status.value]
        else:
            statuses = [RunStatus(s).value for s in status]
        q = self._queries
        page: tuple[builtins.list[RunRecord], str | None] = await self._read(
            lambda conn: q.list_runs(conn, principal=principal, statuses=statuses,
                                     cursor=cursor, limit=limit))
        return page

    async def frames(self, run_id: str, *, after: int = 0, limit: int = 1000
                     ) -> builtins.list[StoredFrame]:
        if limit <= 0:
            raise ValueError(f"frames limit must be > 0, got {limit}")
        q = self._queries
        if after >= q.MAX_SEQ:  # no seq is stored past it (nor fits a 64-bit integer)
            return []
        found: builtins.list[StoredFrame] = await self._read(
            lambda conn: q.frames(conn, run_id, after, min(limit, q.MAX_SEQ)))
        return found

    async def unfinished(self) -> builtins.list[RunRecord]:
        found: builtins.list[RunRecord] = await self._read(self._queries.unfinished)
        return found
