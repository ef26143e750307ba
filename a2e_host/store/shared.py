"""The interface of a run store several host replicas share (DURABILITY.md §3.4).

Layer: plain code, like :mod:`a2e_host.store` (no anyio, no SQL). The PostgreSQL
backend (:mod:`a2e_host.store.postgres`) implements it; the chains plugin checks
``isinstance(store, SharedRunStore)`` to take runs over, tail runs other replicas own,
and cancel them from any replica.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from . import RunRecord, RunStore

__all__ = ["RunWatch", "SharedRunStore"]


class RunWatch(Protocol):
    """A wake-up for one run (:meth:`SharedRunStore.watch`): :meth:`wait` returns once
    a committed batch (of any replica) touched the run since the watch was made or last
    waited, or after a timeout; :meth:`close` stops it (also a context manager)."""

    async def wait(self, at_most: float) -> bool:
        """Wait up to ``at_most`` seconds; returns whether the run changed."""
        ...

    def close(self) -> None: ...

    def __enter__(self) -> RunWatch: ...

    def __exit__(self, *exc_info: object) -> None: ...


@runtime_checkable
class SharedRunStore(RunStore, Protocol):
    """A run store several host replicas share (PostgreSQL, DURABILITY.md §3.4).

    The replica that creates a run owns it (``owner`` = its replica id, at an
    ``epoch``). Replicas heartbeat; a run whose owner has been silent past
    :attr:`lease` seconds is claimed by another (owner := it, epoch + 1) and handed to
    :meth:`on_claimed` to be resumed. Every write of a run is fenced by the epoch it is
    owned at: once another replica took it over, this replica's writes of it are
    dropped, never stored, and :meth:`on_lost` is told.

    Attributes:
        lease: seconds of silence after which a replica's runs are taken over.
    """

    @property
    def lease(self) -> float: ...

    def on_claimed(self, callback: Callable[[RunRecord], None]) -> Callable[[], None]:
        """Call ``callback(record)`` (on the loop) for each run this replica takes over;
        while no callback is registered, the replica claims nothing.

        Returns:
            A function that unregisters it.
        """
        ...

    def on_lost(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(run_id)`` when another replica took over a run this one owned
        (called before the commit callbacks of the batch whose writes it refused)."""
        ...

    def on_cancel(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(run_id)`` when a cancel was asked (:meth:`request_cancel` on
        any replica) for a run this replica owns, and again while it still runs (a run
        being taken over may not be live yet): ``callback`` must be idempotent."""
        ...

    def watch(self, run_id: str) -> RunWatch:
        """A wake-up for ``run_id`` (make it *before* reading, so no commit is missed)."""
        ...
