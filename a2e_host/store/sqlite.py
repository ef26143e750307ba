"""The embedded run store: one SQLite file, one writer thread (DURABILITY.md §3.1).

Layer: store backend (anyio for reads in worker threads; stdlib ``sqlite3``). Implements
:class:`a2e_host.store.RunStore`; read the package docstring for tickets, commits,
backpressure and failure.

- **Writes** are tuples appended to a deque, without a lock (no encoding, no hashing,
  no I/O on the loop). The writer thread (:mod:`._writer`) commits everything queued as one
  transaction, then hops to the loop once (``call_soon_threadsafe``) with the highest
  committed ticket; the loop updates :attr:`SQLiteRunStore.committed` and calls the
  commit callbacks.
- **Reads** run on their own ``query_only`` connection in a worker thread
  (``anyio.to_thread``), one at a time (the others wait on the loop, holding no thread),
  and see committed data only (WAL readers never block the writer).
- **Files**: the database, its ``-wal`` and ``-shm`` are owner-only (0600); ``<path>.lock``
  holds an exclusive lock while a host writes, so two hosts never resume the same runs.
  WAL with ``synchronous=NORMAL`` (``FULL`` by option) and ``journal_size_limit`` 64 MiB.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from types import ModuleType
from typing import Any, ClassVar, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread

from ..logs import get_logger
from . import (
    CommitCallback,
    Durability,
    FrameItem,
    RunRecord,
    StoredFrame,
    StoreError,
)
from . import _queries as q
from ._loop_side import LoopSide, frame_bytes
from ._schema import OwnerLock, connect_reader, connect_writer
from ._writer import APPEND, CREATE, JOB, Writer

__all__ = ["SQLiteRunStore", "open_sqlite_store", "open_store"]

T = TypeVar("T")

_OPEN, _CLOSING, _CLOSED = range(3)


def default_owner() -> str:
    """``host:pid:random``: a host instance's owner id."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


async def open_sqlite_store(
    path: str,
    *,
    durability: Durability = "normal",
    readonly: bool = False,
    owner: str = "",
    max_pending: int = 65_536,
    max_pending_bytes: int = 64 * 1024 * 1024,
    commit_delay: float = 0.0,
    blob_threshold: int = 4096,
) -> SQLiteRunStore:
    """Open the SQLite run store at ``path`` (see :func:`a2e_host.store.open_store`).

    Args:
        max_pending_bytes: the ceiling of queued frame and output bytes (besides
            ``max_pending`` writes) above which :attr:`SQLiteRunStore.full` is true.

    Raises:
        StoreVersionError: the file was written by a newer a2e-host.
        StoreError: it cannot be opened, is not a run store, or another process writes it.
        ValueError: a durability other than ``normal``/``full``, or a ceiling <= 0.
    """
    if durability not in ("normal", "full"):
        raise ValueError(f"durability must be 'normal' or 'full', got {durability!r}")
    if max_pending <= 0 or max_pending_bytes <= 0:
        raise ValueError("the store's max_pending and max_pending_bytes must be > 0")
    loop = asyncio.get_running_loop()

    def open_files() -> tuple[OwnerLock | None, sqlite3.Connection | None, sqlite3.Connection]:
        if readonly:
            return None, None, connect_reader(path, readonly=True)
        lock = OwnerLock(path)
        try:
            writer = connect_writer(path, durability=durability)
            try:
                return lock, writer, connect_reader(path, readonly=False)
            except BaseException:
                writer.close()
                raise
        except BaseException:
            lock.release()
            raise

    with anyio.CancelScope(shield=True):  # a cancel mid-open would leak the lock
        lock, writer_conn, reader_conn = await anyio.to_thread.run_sync(open_files)
    store = SQLiteRunStore(
        path, loop, reader_conn, owner=owner or default_owner(),
        max_pending=max_pending, max_pending_bytes=max_pending_bytes, lock=lock)
    if writer_conn is not None:
        store._start_writer(writer_conn, blob_threshold=blob_threshold,
                            commit_delay=commit_delay)
    return store


open_store = open_sqlite_store
"""This backend's opener, as :func:`a2e_host.store.open_store` finds it."""


class SQLiteRunStore(LoopSide):
    """The run store in one SQLite file. Make it with :func:`open_sqlite_store`; call
    its writes from the event loop thread it was opened on.

    Attributes:
        path: the database file.
        owner: this instance's owner id.
        committed: the highest committed ticket, as the loop knows it.
        pending: writes made and not yet committed.
        pending_bytes: frame and output bytes of those writes.
        max_pending / max_pending_bytes: the ceilings of :attr:`full`.
        error: why the store broke, else None.
    """

    _queries: ClassVar[ModuleType] = q

    def __init__(self, path: str, loop: asyncio.AbstractEventLoop,
                 reader: sqlite3.Connection, *, owner: str, max_pending: int,
                 max_pending_bytes: int, lock: OwnerLock | None) -> None:
        self.path = path
        self.owner = owner
        self.max_pending = max_pending
        self.max_pending_bytes = max_pending_bytes
        self.committed = 0
        self.pending_bytes = 0
        self.full = False
        self.error: BaseException | None = None
        self.log = get_logger().bind(store=path)
        self._loop = loop
        self._reader = reader
        self._read_lock = threading.Lock()
        # reads wait their turn on the loop, not in worker threads other work needs
        self._read_turn = anyio.CapacityLimiter(1)
        self._lock = lock
        self._writer: Writer | None = None
        self._state = _OPEN
        self._ticket = 0
        self._callbacks: dict[int, CommitCallback] = {}
        self._next_callback = 0
        self._changed: anyio.Event | None = None  # set at the next commit (or break)
        self._jobs: dict[int, asyncio.Future[Any]] = {}
        self._job_count = 0
        self._wake_due = False  # a wake of the idle writer is scheduled on the loop
        self._deferred: list[Callable[[], object]] = []  # see defer()

    def _start_writer(self, conn: sqlite3.Connection, *, blob_threshold: int,
                      commit_delay: float) -> None:
        self._writer = Writer(conn, self._report, self.log, blob_threshold=blob_threshold,
                              commit_delay=commit_delay, path=self.path)
        self._writer.start()

    # ── state ───────────────────────────────────────────────────────────────

    def _refuse(self) -> StoreError:
        if self.error is not None:
            return StoreError(f"the run store {self.path!r} failed ({self.error}); nothing "
                              "more is stored; see the host log and restart the host")
        if self._writer is None:
            return StoreError(f"the run store {self.path!r} is open read-only")
        return StoreError(f"the run store {self.path!r} is closed")

    def _put(self, op_kind: int, nbytes: int, *args: Any) -> int:
        writer = self._writer
        if writer is None or self._state != _OPEN or self.error is not None:
            raise self._refuse()
        self._ticket = ticket = self._ticket + 1
        queue = writer.queue
        queue.append((op_kind, ticket, nbytes, *args))
        if writer.idle or writer.delaying:
            self._kick(writer, queue)
        self.pending_bytes += nbytes
        self._count_pending()
        return ticket

    def _kick(self, writer: Writer, queue: deque[tuple[Any, ...]]) -> None:
        """After a write: wake the idle writer (once per loop tick, not per write: the
        writes a tick makes go out as one batch, and the loop takes the writer's lock
        once, not per event), or the delaying one when a full batch is queued."""
        if writer.idle:
            if not self._wake_due:
                self._wake_due = True
                self._loop.call_soon(self._wake)
        elif writer.delaying and len(queue) == writer.max_batch:
            writer.wake()

    def _wake(self) -> None:
        try:
            if self._deferred:
                self._run_deferred()  # their puts schedule no second wake: one is due
        finally:
            self._wake_due = False
        writer = self._writer
        if writer is not None and writer.idle:
            writer.wake()

    # ── writes ──────────────────────────────────────────────────────────────

    def create(self, record: RunRecord) -> int:
        record = self._stamped(record)
        return self._put(CREATE, len(record.request), q.record_row(record))

    def append(self, run_id: str, frame: StoredFrame) -> int:
        return self.append_many(run_id, frame.seq, [
            (frame.node_id, frame.phase, frame.frame, frame.output)])

    def append_many(self, run_id: str, first_seq: int, items: list[FrameItem],
                    nbytes: int = -1, *, now: bool = False) -> int:
        if nbytes < 0:
            nbytes = frame_bytes(items)
        ticket = self._put(APPEND, nbytes, run_id, first_seq, items)
        writer = self._writer
        if now and writer is not None and writer.idle:
            writer.wake()
        return ticket

    def defer(self, flush: Callable[[], object]) -> None:
        # at the end of this tick, whatever the writer does: one that looks busy may be
        # about to wait, and it cannot see (nor run) what is deferred on the loop
        self._deferred.append(flush)
        if not self._wake_due:
            self._wake_due = True
            self._loop.call_soon(self._wake)

    async def _job(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        future: asyncio.Future[T] = self._loop.create_future()
        # a number never used twice: a cancelled caller's job still commits, and its
        # result must not resolve a later job (``id()`` of a freed future is reused)
        self._job_count += 1
        token = self._job_count
        self._put(JOB, 0, fn, token)
        self._jobs[token] = future
        self._hurry()
        try:
            return await future
        finally:
            self._jobs.pop(token, None)

    async def create_or_get(self, record: RunRecord) -> tuple[RunRecord, bool]:
        record = self._stamped(record)
        return await self._job(lambda conn: q.create_or_get(conn, record))

    async def claim(self, run_id: str) -> RunRecord | None:
        owner, now = self.owner, time.time()
        return await self._job(lambda conn: q.claim(conn, run_id, owner, now))

    async def prune(self, now: float, *, limit: int = 100) -> int:
        if limit <= 0:
            raise ValueError(f"prune limit must be > 0, got {limit}")
        return await self._job(lambda conn: q.prune(conn, now, limit))

    # ── commits ─────────────────────────────────────────────────────────────

    def _report(self, ticket: int, nbytes: int, jobs: list[tuple[Any, bool, Any]],
                error: BaseException | None) -> None:
        """Writer thread → loop: one hop per committed batch."""
        try:
            self._loop.call_soon_threadsafe(self._committed_batch, ticket, nbytes, jobs, error)
        except RuntimeError:  # the loop is closed: nobody is left to tell
            pass

    def _committed_batch(self, ticket: int, nbytes: int, jobs: list[tuple[Any, bool, Any]],
                         error: BaseException | None) -> None:
        if error is not None:
            self.error = error
            for future in self._jobs.values():
                if not future.done():
                    future.set_exception(self._refuse())
        else:
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
        self._notify()

    def _notify(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()
        for callback in list(self._callbacks.values()):
            try:
                callback(self.committed)
            except Exception as exc:
                self.log.error("a commit callback failed", exc_info=exc)

    def on_commit(self, callback: CommitCallback) -> Callable[[], None]:
        key = self._next_callback
        self._next_callback += 1
        self._callbacks[key] = callback

        def unregister() -> None:
            self._callbacks.pop(key, None)

        return unregister

    async def _wait_change(self) -> None:
        if self._changed is None:
            self._changed = anyio.Event()
        await self._changed.wait()

    def _check(self) -> None:
        if self.error is not None or self._state == _CLOSED:
            raise self._refuse()

    def _hurry(self) -> None:
        if self._writer is not None:
            self._writer.hurry(self._ticket)

    async def wait_committed(self, ticket: int) -> None:
        if self.committed < ticket:
            self._hurry()
        while self.committed < ticket:
            self._check()
            await self._wait_change()

    async def wait_writable(self) -> None:
        while self.full:
            self._check()
            await self._wait_change()
        self._check()

    async def flush(self) -> None:
        if self._writer is None:
            raise self._refuse()
        self._run_deferred()
        await self.wait_committed(self._ticket)
        self._check()

    # ── reads ───────────────────────────────────────────────────────────────

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._state == _CLOSED:
            raise self._refuse()

        def locked() -> T:
            with self._read_lock:
                try:
                    return fn(self._reader)
                except sqlite3.Error as exc:
                    raise StoreError(f"reading the run store {self.path!r} failed: "
                                     f"{exc}") from exc

        return await anyio.to_thread.run_sync(locked, limiter=self._read_turn)

    async def aclose(self) -> None:
        if self._state != _OPEN:
            return
        if self.error is None:
            self._run_deferred()  # what was deferred is stored before the end
        self._state = _CLOSING
        writer = self._writer
        try:
            if writer is not None:
                writer.close()
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(writer.join)
                    await anyio.lowlevel.checkpoint()  # the last commit report runs
        finally:
            self._state = _CLOSED
            with self._read_lock:
                self._reader.close()
            if self._lock is not None:
                self._lock.release()
            for future in self._jobs.values():
                if not future.done():
                    future.set_exception(self._refuse())
            self._notify()

    async def __aenter__(self) -> SQLiteRunStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

