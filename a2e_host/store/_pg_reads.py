"""The PostgreSQL run store's reads: committed data only, on a pooled connection.

Layer: store backend (psycopg, asyncio). A mixin of :class:`~a2e_host.store.postgres.
PostgresRunStore`; the SQL is in :mod:`._pg_queries`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from . import StoreError

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
