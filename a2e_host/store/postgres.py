"""The shared run store: PostgreSQL, for several host replicas (DURABILITY.md §3.4).

Layer: store backend (psycopg 3 async, psycopg_pool, asyncio). Implements
:class:`a2e_host.store.RunStore` with the SQLite store's semantics (tickets, group commit,
commit callbacks on the loop, backpressure, failure: read the package docstring) and
:class:`a2e_host.store.SharedRunStore` (ownership across replicas). Selected by
``open_store("postgresql://…")``; the ``postgres`` extra installs psycopg.

- **Writes** are the SQLite store's op tuples on a deque; ONE writer task with its own
  connection commits what is queued (:mod:`._pg_writer`): COPY of the frames, a fenced
  lock of the runs written, ONE ``pg_notify`` per batch naming the runs it touched.
- **Reads** use a small pool (:mod:`psycopg_pool`), committed data only.
- **Ownership**: this store's :attr:`owner` is its replica id. A heartbeat task updates
  the replica's ``replicas`` row every ``lease / 5`` seconds, and, while a resumer is
  registered (:meth:`PostgresRunStore.on_claimed`), claims runs whose owner has been
  silent past ``lease`` (``FOR UPDATE SKIP LOCKED``), then checks the runs it owns: one
  another replica took over is *lost* (:meth:`~PostgresRunStore.on_lost`), one whose
  cancel was asked is reported (:meth:`~PostgresRunStore.on_cancel`).
- **Wake-ups**: a listening connection receives the batches' notifications and wakes the
  :meth:`~PostgresRunStore.watch` of each run named (and ``a2e_ctl`` cancels); a tail
  also polls, so a lost notification costs a second, never a frame.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any, ClassVar, TypeVar

from ..logs import get_logger
from . import (
    CommitCallback,
    Durability,
    FrameItem,
    RunRecord,
    StoredFrame,
    StoreError,
)
from . import _pg_queries as q
from ._loop_side import LoopSide, frame_bytes
from ._pg_connect import CONNECT_OPTIONS, default_replica_id
from ._pg_connect import where as _where
from ._pg_notify import Listener
from ._pg_owner import Ownership, hold_replica_id
from ._pg_reads import Reads
from ._pg_schema import migrate, read_version
from ._pg_writer import apply_cancel, apply_job, apply_segment, prepare, segments
from ._writer import APPEND, CANCEL, CREATE, JOB, MAX_BATCH

__all__ = ["PostgresRunStore", "open_postgres_store", "open_store", "default_replica_id"]

T = TypeVar("T")
_OPEN, _CLOSING, _CLOSED = range(3)
DEFAULT_LEASE = 10.0
CLOSE_TIMEOUT = 30.0  # seconds aclose waits for the writer to commit what is queued


async def open_postgres_store(
    url: str,
    *,
    durability: Durability = "normal",
    readonly: bool = False,
    owner: str = "",
    max_pending: int = 65_536,
    max_pending_bytes: int = 64 * 1024 * 1024,
    commit_delay: float = 0.0,
    blob_threshold: int = 4096,
    lease: float = DEFAULT_LEASE,
    pool_size: int = 4,
) -> PostgresRunStore:
    """Open the run store in the PostgreSQL database at ``url`` (migrating it), on the
    running event loop (see :func:`a2e_host.store.open_store`).

    Args:
        owner: this replica's id (``--replica-id``); :func:`default_replica_id` when empty.
        durability: ``normal`` commits with ``synchronous_commit = on`` as ``full`` does:
            a commit PostgreSQL acknowledged survives a crash of the host and of the
            database server.
        lease: seconds a replica may be silent before another takes its runs over (> 0);
            it heartbeats every ``lease / 5``.
        pool_size: connections for reads and heartbeats (besides the writer's and the
            listener's).

    Raises:
        StoreVersionError: the database was migrated by a newer a2e-host.
        StoreError: it cannot be reached, or is not a run store (read-only).
        ValueError: a ceiling or the lease is not > 0.
    """
    if durability not in ("normal", "full"):
        raise ValueError(f"durability must be 'normal' or 'full', got {durability!r}")
    if max_pending <= 0 or max_pending_bytes <= 0 or lease <= 0:
        raise ValueError("the store's max_pending, max_pending_bytes and lease must be > 0")
    try:
        import psycopg
        from psycopg_pool import AsyncConnectionPool
    except ImportError as exc:
        raise StoreError("a postgresql:// store needs psycopg: pip install "
                         "'a2e-host[postgres]'") from exc
    where = _where(url)
    owner = owner or default_replica_id()
    writer_conn, leftovers = None, []
    try:
        if not readonly:
            writer_conn = await psycopg.AsyncConnection.connect(
                url, autocommit=True, **CONNECT_OPTIONS)
            await migrate(writer_conn, where)
            leftovers = await hold_replica_id(writer_conn, owner, where)
            await prepare(writer_conn)
        else:
            async with await psycopg.AsyncConnection.connect(
                url, autocommit=True, **CONNECT_OPTIONS) as conn:
                if await read_version(conn, where) == 0:
                    raise StoreError(f"{where} is not a run store yet; check --store")
        pool = AsyncConnectionPool(url, min_size=1, max_size=pool_size, open=False,
                                   kwargs={"autocommit": True, **CONNECT_OPTIONS}, name="a2e-store")
        await pool.open(wait=True, timeout=30)
    except psycopg.Error as exc:
        if writer_conn is not None:
            await writer_conn.close()
        raise StoreError(f"cannot open the run store {where}: {exc}") from exc
    except BaseException:
        if writer_conn is not None:
            await writer_conn.close()
        raise
    store = PostgresRunStore(where, url, pool, owner=owner,
                             max_pending=max_pending, max_pending_bytes=max_pending_bytes,
                             lease=lease, commit_delay=commit_delay,
                             blob_threshold=blob_threshold)
    store._leftovers = leftovers
    if writer_conn is not None:
        store._start(writer_conn)
        try:  # a watch made after open is woken by the next commit
            await asyncio.wait_for(store._listener.listening.wait(), 30)
        except BaseException:
            await store.aclose()
            raise
    return store


open_store = open_postgres_store
"""This backend's opener, as :func:`a2e_host.store.open_store` finds it."""


class PostgresRunStore(Ownership, Reads, LoopSide):
    """The run store in a PostgreSQL database, shared by replicas. Make it with
    :func:`open_postgres_store`; call it from the event loop it was opened on.

    Attributes:
        path: the database, as named in messages (no password).
        owner: this replica's id.
        lease: seconds of silence after which a replica's runs are taken over.
        committed / pending / pending_bytes / error: as the SQLite store's.
    """

    _queries: ClassVar[ModuleType] = q

    def __init__(self, where: str, url: str, pool: Any, *, owner: str, max_pending: int,
                 max_pending_bytes: int, lease: float, commit_delay: float,
                 blob_threshold: int) -> None:
        self.path = where
        self.owner = owner
        self.lease = lease
        self.max_pending = max_pending
        self.max_pending_bytes = max_pending_bytes
        self.committed = 0
        self.pending_bytes = 0
        self.full = False
        self.error: BaseException | None = None
        self.log = get_logger().bind(store=where, replica=owner)
        self._url = url
        self._pool = pool
        self._delay = commit_delay
        self._threshold = blob_threshold
        self._state = _OPEN
        self._ticket = 0
        self._hurry_ticket = 0
        self._queue: deque[tuple[Any, ...]] = deque()
        self._wake = asyncio.Event()
        self._deferred: list[Callable[[], object]] = []  # see defer()
        self._changed = asyncio.Event()
        self._callbacks: dict[int, CommitCallback] = {}
        self._next_callback = 0
        self._jobs: dict[int, asyncio.Future[Any]] = {}
        self._job_count = 0
        self._owned: dict[str, tuple[int, int]] = {}
        self._claimers: dict[int, Callable[[RunRecord], None]] = {}
        self._losers: dict[int, Callable[[str], None]] = {}
        self._cancellers: dict[int, Callable[[str], None]] = {}
        self._cancels_told: set[str] = set()
        self._tasks: list[asyncio.Task[None]] = []
        self._writer: asyncio.Task[None] | None = None
        self._listener = Listener(url, self.log, self._cancel_asked)

    def _start(self, writer_conn: Any) -> None:
        self._writer = asyncio.create_task(self._write_loop(writer_conn),
                                           name="a2e-store-writer")
        self._tasks = [
            asyncio.create_task(self._heartbeat_loop(), name="a2e-store-heartbeat"),
            asyncio.create_task(self._listener.run(), name="a2e-store-listener"),
        ]

    # ── state ───────────────────────────────────────────────────────────────

    def _refuse(self) -> StoreError:
        if self.error is not None:
            return StoreError(f"the run store {self.path} failed ({self.error}); nothing "
                              "more is stored; see the host log and restart the host")
        if self._writer is None:
            return StoreError(f"the run store {self.path} is open read-only")
        return StoreError(f"the run store {self.path} is closed")

    def _put(self, op_kind: int, nbytes: int, *args: Any) -> int:
        if self._writer is None or self._state != _OPEN or self.error is not None:
            raise self._refuse()
        self._ticket = ticket = self._ticket + 1
        self._queue.append((op_kind, ticket, nbytes, *args))
        self.pending_bytes += nbytes
        self._count_pending()
        self._wake.set()
        return ticket

    # ── writes ──────────────────────────────────────────────────────────────

    def create(self, record: RunRecord) -> int:
        record = self._stamped(record)
        q.text_only(record.run_id, **q.text_fields(record))
        return self._put(CREATE, len(record.request), q.record_row(record))

    def append(self, run_id: str, frame: StoredFrame) -> int:
        return self.append_many(run_id, frame.seq, [
            (frame.node_id, frame.phase, frame.frame, frame.output)])

    def append_many(self, run_id: str, first_seq: int, items: list[FrameItem],
                    nbytes: int = -1, *, now: bool = False) -> int:
        # ``now`` changes nothing here: the writer is a task of this loop, which runs
        # when the producer yields
        q.text_only(run_id, run_id=run_id)
        for node_id, phase, _, _ in items:
            q.text_only(run_id, node_id=node_id, phase=phase)
        if nbytes < 0:
            nbytes = frame_bytes(items)
        return self._put(APPEND, nbytes, run_id, first_seq, items)

    def defer(self, flush: Callable[[], object]) -> None:
        # the writer task runs them on the loop before it takes the queue; once it is
        # gone (the store broke or is closing) nobody would: run them from the loop, so
        # their appends are refused and their producers told
        self._deferred.append(flush)
        writer = self._writer
        if (writer is None or writer.done() or self._state != _OPEN
                or self.error is not None):
            asyncio.get_running_loop().call_soon(self._run_deferred)
        else:
            self._wake.set()

    async def _job(self, fn: Callable[[Any], Awaitable[T]]) -> T:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._job_count += 1
        token = self._job_count
        self._put(JOB, 0, fn, token)
        self._jobs[token] = future
        self._hurry_ticket = self._ticket
        try:
            return await future
        finally:
            self._jobs.pop(token, None)

    async def create_or_get(self, record: RunRecord) -> tuple[RunRecord, bool]:
        record = self._stamped(record)
        q.text_only(record.run_id, **q.text_fields(record))

        async def job(conn: Any) -> tuple[RunRecord, bool]:
            found, created, key, epoch = await q.create_or_get(conn, record)
            if created:
                self._owned[record.run_id] = (key, epoch)
            return found, created

        return await self._job(job)

    async def claim(self, run_id: str) -> RunRecord | None:
        owner, now = self.owner, time.time()

        async def job(conn: Any) -> RunRecord | None:
            claimed = await q.claim(conn, run_id, owner, now)
            if claimed is None:
                return None
            self._owned[run_id] = (claimed[1], claimed[2])
            return claimed[0]

        return await self._job(job)

    async def prune(self, now: float, *, limit: int = 100) -> int:
        if limit <= 0:
            raise ValueError(f"prune limit must be > 0, got {limit}")
        return await self._job(lambda conn: q.prune(conn, now, limit))

    # ── the writer task ─────────────────────────────────────────────────────

    async def _take(self) -> list[tuple[Any, ...]] | None:
        queue = self._queue
        self._run_deferred()
        while not queue:
            if self._state != _OPEN:
                return None
            self._wake.clear()
            await self._wake.wait()
            self._run_deferred()
        if self._delay > 0 and self._state == _OPEN and queue[0][1] > self._hurry_ticket:
            deadline = time.monotonic() + self._delay
            while (len(queue) < MAX_BATCH and self._state == _OPEN
                   and queue[0][1] > self._hurry_ticket):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), left)
                except TimeoutError:
                    break
                finally:
                    self._run_deferred()
        popleft = queue.popleft
        return [popleft() for _ in range(min(len(queue), MAX_BATCH))]

    async def _write_loop(self, conn: Any) -> None:
        try:
            while (batch := await self._take()) is not None:
                results: list[tuple[int, bool, Any]] = []
                lost: list[str] = []
                try:
                    for segment in segments(batch):
                        kind = segment[0][0]
                        if kind == JOB:
                            ok, result = await apply_job(conn, segment[0][3])
                            results.append((segment[0][4], ok, result))
                        elif kind == CANCEL:
                            await apply_cancel(conn, segment[0][3], segment[0][4])
                        else:
                            done = await apply_segment(conn, segment, self._owned,
                                                       self.owner, self._threshold)
                            lost.extend(done.lost)
                            if done.duplicates:
                                self.log.error("frames were not stored twice: their (run, "
                                               "seq) is stored already",
                                               duplicates=done.duplicates)
                            if done.unknown:
                                self.log.error(
                                    "writes of runs this replica does not own (or that do "
                                    "not exist, or whose run_id or idempotency key is "
                                    "taken) were not stored", run_ids=done.unknown[:10])
                except Exception as exc:  # noqa: BLE001 — the store breaks, and says why
                    self.log.error("the run store failed; no more writes are stored",
                                   exc_info=exc)
                    self._broken(exc, batch)
                    return
                self._committed_batch(batch[-1][1], sum(op[2] for op in batch), results,
                                      lost)
        finally:
            await conn.close()

    def _broken(self, error: BaseException, batch: list[tuple[Any, ...]]) -> None:
        self.error = error
        self._queue.clear()
        for future in self._jobs.values():
            if not future.done():
                future.set_exception(self._refuse())
        self._notify()

    def _committed_batch(self, ticket: int, nbytes: int, jobs: list[tuple[int, bool, Any]],
                         lost: list[str]) -> None:
        self.committed = ticket
        self.pending_bytes -= nbytes
        self._count_pending()
        for token, ok, result in jobs:
            waiting = self._jobs.get(token)
            if waiting is not None and not waiting.done():
                if ok:
                    waiting.set_result(result)
                else:
                    waiting.set_exception(result)
        if lost:
            self._lost(lost)
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        for callback in list(self._callbacks.values()):
            try:
                callback(self.committed)
            except Exception as exc:  # noqa: BLE001
                self.log.error("a commit callback failed", exc_info=exc)

    # ── commits ─────────────────────────────────────────────────────────────

    def on_commit(self, callback: CommitCallback) -> Callable[[], None]:
        return self._register(self._callbacks, callback)

    def _register(self, table: dict[int, Any], callback: Any) -> Callable[[], None]:
        key = self._next_callback
        self._next_callback += 1
        table[key] = callback

        def unregister() -> None:
            table.pop(key, None)

        return unregister

    def _closed(self) -> bool:
        return self._state == _CLOSED

    def unready(self) -> str | None:
        """Why this replica should take no new work (``/readyz``), or None: the store
        failed, is closed, or cannot be reached (its listener is re-connecting)."""
        if self.error is not None or self._writer is None or self._state != _OPEN:
            return str(self._refuse())
        if not self._listener.listening.is_set():
            return (f"the run store {self.path} cannot be reached; listening to it again "
                    "every second")
        return None

    def _running(self) -> bool:
        return self._state == _OPEN and self.error is None

    def _check(self) -> None:
        if self.error is not None or self._state == _CLOSED:
            raise self._refuse()

    async def wait_committed(self, ticket: int) -> None:
        if self.committed < ticket:
            self._hurry_ticket = max(self._hurry_ticket, ticket)
            self._wake.set()
        while self.committed < ticket:
            self._check()
            await self._changed.wait()

    async def wait_writable(self) -> None:
        while self.full:
            self._check()
            await self._changed.wait()
        self._check()

    async def flush(self) -> None:
        if self._writer is None:
            raise self._refuse()
        self._run_deferred()
        await self.wait_committed(self._ticket)
        self._check()

    # ── lifetime ────────────────────────────────────────────────────────────

    async def aclose(self) -> None:
        if self._state != _OPEN:
            return
        if self.error is None:
            self._run_deferred()  # what was deferred is stored before the end
        self._state = _CLOSING
        try:
            writer = self._writer
            if writer is not None:
                self._wake.set()
                try:  # bounded: a writer stuck on a dead database does not hold the exit
                    await asyncio.wait_for(asyncio.shield(writer), CLOSE_TIMEOUT)
                except TimeoutError:
                    self.log.error("the run store's writer did not finish in time; what "
                                   "it had queued is not stored", seconds=CLOSE_TIMEOUT)
                    writer.cancel()
                    await asyncio.gather(writer, return_exceptions=True)
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                try:
                    await task
                except (asyncio.CancelledError, Exception):  # noqa: BLE001
                    pass
            if writer is not None and self.error is None:
                try:  # leaving: our unfinished runs may be taken over at once
                    async with self._pool.connection() as conn:
                        await q.leave(conn, self.owner)
                except Exception as exc:  # noqa: BLE001
                    self.log.warning("could not leave the replica table", error=str(exc))
        finally:
            self._state = _CLOSED
            await self._pool.close()
            for future in self._jobs.values():
                if not future.done():
                    future.set_exception(self._refuse())
            self._notify()

    async def __aenter__(self) -> PostgresRunStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
