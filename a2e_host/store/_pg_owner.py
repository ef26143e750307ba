"""The PostgreSQL run store's side of ownership: heartbeats, takeovers, lost runs and
cancels asked from other replicas (DURABILITY.md §3.4 "Ownership").

Layer: store backend (asyncio). A mixin of :class:`~a2e_host.store.postgres.
PostgresRunStore`, holding what :class:`~a2e_host.store.shared.SharedRunStore` adds to
a run store. Every ``lease / 5`` seconds the heartbeat task, on a connection of its own:

1. updates this replica's ``replicas`` row (``heartbeat_at`` := the database's now);
2. reads the epoch and cancel flag of every run this replica owns: a run whose epoch
   moved on was taken over (*lost*: :meth:`Ownership.on_lost`), a cancel asked for
   a run still running is delivered again (:meth:`Ownership.on_cancel`);
3. while a resumer is registered (:meth:`Ownership.on_claimed`), claims up to 16 runs
   whose owner has been silent past the lease (``FOR UPDATE SKIP LOCKED``) and hands
   each to it.

Times are the database's (``now()``), so replicas' clocks need not agree.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from . import RunRecord, StoreError
from . import _pg_queries as q
from ._pg_connect import CONNECT_OPTIONS
from ._pg_notify import Listener, Watch

__all__ = ["Ownership", "hold_replica_id"]


class Ownership(ABC):
    """Heartbeats, takeovers, lost runs and remote cancels of a PostgreSQL store."""

    owner: str
    lease: float
    log: Any
    error: BaseException | None
    _owned: dict[str, tuple[int, int]]
    _claimers: dict[int, Callable[[RunRecord], None]]
    _losers: dict[int, Callable[[str], None]]
    _cancellers: dict[int, Callable[[str], None]]
    _cancels_told: set[str]
    _listener: Listener
    _url: str
    _leftovers: list[int]

    @abstractmethod
    def _register(self, table: dict[int, Any], callback: Any) -> Callable[[], None]:
        """Keep ``callback`` in ``table`` until the returned function is called."""

    @abstractmethod
    def _running(self) -> bool:
        """Whether the store is open (the heartbeat stops once it is not)."""

    def _lost(self, run_ids: Sequence[str]) -> None:
        """Runs another replica took over: their writes here are refused from now on;
        whoever runs them here is told (before any commit callback of the batch)."""
        for run_id in run_ids:
            self._owned.pop(run_id, None)
            self.log.warning("a run was taken over by another replica; it stops here",
                             run_id=run_id)
            for callback in list(self._losers.values()):
                try:
                    callback(run_id)
                except Exception as exc:  # noqa: BLE001
                    self.log.error("a lost-run callback failed", exc_info=exc)

    def on_claimed(self, callback: Callable[[RunRecord], None]) -> Callable[[], None]:
        """Call ``callback(record)`` with each run this replica takes over (its owner
        went silent past the lease); while none is registered, nothing is claimed."""
        return self._register(self._claimers, callback)

    def on_lost(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(run_id)`` when a run this replica owned was taken over."""
        return self._register(self._losers, callback)

    def on_cancel(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback(run_id)`` when a cancel is asked (from any replica) for a run
        this replica owns, and again at each heartbeat while the run is still running:
        a notification that came while the run was not live here yet (being taken
        over) is not lost. ``callback`` must be idempotent."""
        return self._register(self._cancellers, callback)

    def watch(self, run_id: str) -> Watch:
        """A wake-up for ``run_id``: set by the next committed batch touching it (any
        replica's). Make it before reading, so no commit falls between."""
        return self._listener.watch(run_id)

    def _cancel_asked(self, run_id: str, *, again: bool = False) -> None:
        if run_id in self._owned and (again or run_id not in self._cancels_told):
            self._cancels_told.add(run_id)
            for callback in list(self._cancellers.values()):
                try:
                    callback(run_id)
                except Exception as exc:  # noqa: BLE001
                    self.log.error("a cancel callback failed", exc_info=exc)

    async def _heartbeat_loop(self) -> None:
        """Beat every ``lease / 5`` seconds on a connection of its own (never queued
        behind reads for a pooled one), opened again after a failure."""
        import psycopg

        interval = self.lease / 5
        conn: Any = None
        try:
            while self._running():
                try:
                    if conn is None:
                        conn = await psycopg.AsyncConnection.connect(
                            self._url, autocommit=True, **CONNECT_OPTIONS)
                    # bounded: a database that stops answering must not stall the
                    # beats behind one statement; a whole lease, as a beat slower than
                    # that keeps nothing, and a shorter bound would give up beats a
                    # loaded machine answers late (each retry costing a new connection)
                    await asyncio.wait_for(self._beat(conn), self.lease)
                except Exception as exc:  # noqa: BLE001 — the database may come back
                    self.log.warning("the replica heartbeat failed", error=str(exc) or (
                        f"no answer in {self.lease:g} seconds"))
                    if conn is not None:
                        await conn.close()
                        conn = None
                await asyncio.sleep(interval)
        finally:
            if conn is not None:
                await conn.close()

    async def _beat(self, conn: Any) -> None:
        await q.heartbeat(conn, self.owner)
        owned = dict(self._owned)
        self._cancels_told &= set(owned)  # forget runs that ended or left
        if owned:
            by_key = {key: (run_id, epoch) for run_id, (key, epoch) in owned.items()}
            for key, epoch, status, cancel in await q.ownership(conn, list(by_key)):
                run_id, mine = by_key[key]
                if epoch != mine and self._owned.get(run_id) == (key, mine):
                    self._lost([run_id])
                elif cancel and status == "running":  # told again: see on_cancel
                    self._cancel_asked(run_id, again=True)
        if self._claimers and self._running():
            claimed = await q.claim_orphans(conn, self.owner, self.lease,
                                            self._leftovers, time.time())
            # committed: these runs are this replica's now. Each stays a leftover (claimed
            # again at the next beat, by id) until it was handed over, so a read or a
            # callback failing here strands none of them.
            self._leftovers = list(dict.fromkeys(
                [*self._leftovers, *(key for key, _epoch, _run_id in claimed)]))
            for key, epoch, run_id in claimed:
                self._owned[run_id] = (key, epoch)
            for key, _epoch, run_id in claimed:
                record = await q.get(conn, run_id)
                if record is not None:
                    self.log.info("took over a run whose replica went silent",
                                  run_id=run_id, epoch=record.epoch)
                    for callback in list(self._claimers.values()):
                        callback(record)
                self._leftovers = [k for k in self._leftovers if k != key]


_REPLICA_LOCK_PREFIX = "a2e-host replica "


async def hold_replica_id(conn: Any, owner: str, where: str) -> list[int]:
    """Take the session advisory lock of replica id ``owner`` on the writer's connection,
    held while the store is open (PostgreSQL drops it when the process dies); return
    the ``runs.id`` of the running runs ``owner`` holds then: a previous process's under
    this id, which this one claims as a silent replica's (no clock is compared).

    Two live processes under one id would heartbeat one ``replicas`` row, so the runs of
    one that dies would never be taken over, and each would claim the other's runs as
    its own leftovers: the second is refused.

    Raises:
        StoreError: another open store holds ``owner``.
    """
    cur = await conn.execute(  # per schema: stores in two schemas are two stores
        "SELECT pg_try_advisory_lock(hashtextextended(%s || current_schema(), 0))",
        (_REPLICA_LOCK_PREFIX + owner + " in ",))
    row = await cur.fetchone()
    if not row[0]:
        raise StoreError(f"replica id {owner!r} is in use by another running replica of "
                         f"the run store {where}; give each replica its own --replica-id")
    # alive from now: a run created before the heartbeat task's first beat is never
    # taken for a silent replica's
    await q.heartbeat(conn, owner)
    cur = await conn.execute("SELECT id FROM runs WHERE owner = %s AND status = 'running'",
                             (owner,))
    return [int(r[0]) for r in await cur.fetchall()]

