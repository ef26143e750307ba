"""The PostgreSQL run store's reads: committed data only, on a pooled connection.

Layer: store backend (psycopg, asyncio). A mixin of :class:`~a2e_host.store.postgres.
PostgresRunStore`; the SQL is in :mod:`._pg_queries`.
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from . import RunRecord, RunStatus, StoredFrame, StoreError
from . import _pg_queries as q

__all__ = ["Reads"]

T = TypeVar("T")


class Reads(ABC):
    """The read half of :class:`~a2e_host.store.RunStore` over a psycopg pool; the store
    class provides whether it is closed and the error a closed store answers."""

    path: str
    _pool: Any

    @abstractmethod
    def _closed(self) -> bool:
        """Whether the store is closing or closed (reads are then refused)."""

    @abstractmethod
    def _refuse(self) -> StoreError:
        """The error a read of a closed store raises."""

    async def _read(self, fn: Callable[[Any], Awaitable[T]]) -> T:
        if self._closed():
            raise self._refuse()
        import psycopg

        try:
            async with self._pool.connection() as conn:
                return await fn(conn)
        except psycopg.Error as exc:
            raise StoreError(f"reading the run store {self.path} failed: {exc}") from exc

    async def get(self, run_id: str) -> RunRecord | None:
        return await self._read(lambda conn: q.get(conn, run_id))

    async def by_idempotency_key(self, principal: str, key: str) -> RunRecord | None:
        return await self._read(lambda conn: q.by_idempotency_key(conn, principal, key))

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
        return await self._read(lambda conn: q.list_runs(
            conn, principal=principal, statuses=statuses, cursor=cursor, limit=limit))

    async def frames(self, run_id: str, *, after: int = 0, limit: int = 1000
                     ) -> builtins.list[StoredFrame]:
        if limit <= 0:
            raise ValueError(f"frames limit must be > 0, got {limit}")
        if after >= q.MAX_SEQ:
            return []
        return await self._read(lambda conn: q.frames(conn, run_id, after,
                                                      min(limit, q.MAX_SEQ)))

    async def unfinished(self) -> builtins.list[RunRecord]:
        return await self._read(q.unfinished)
