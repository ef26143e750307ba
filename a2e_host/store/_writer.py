"""The SQLite run store's writer thread: group commit of everything queued.

Layer: store backend (stdlib ``sqlite3`` and ``threading``, no anyio, no event loop).
The store's loop side appends *ops* (plain tuples, the cheapest thing to build per event)
to a deque, without a lock; this thread takes everything queued (at most
:data:`MAX_BATCH` ops), applies it in one transaction, commits, and reports the highest
committed ticket back through ``report`` (which hops to the loop). Awaited *jobs*
(create-or-get, claim, prune) run inside the same transaction, each under a savepoint,
so one failing job fails alone; their results travel with the commit report, so a
caller never sees a result that is not committed.

A batch that cannot be committed (an I/O error, a full disk) is rolled back and breaks
the store: the thread reports the error and stops; nothing queued after it is written.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["Writer", "APPEND", "CREATE", "FINISH", "CANCEL", "JOB", "MAX_BATCH"]

APPEND, CREATE, FINISH, CANCEL, JOB = range(5)
"""Op kinds, the first item of each op tuple:

- ``(APPEND, ticket, nbytes, run_id, seq, node_id, phase, frame, output)``
- ``(CREATE, ticket, nbytes, row)`` with ``row`` the ``runs`` columns after ``id``
- ``(FINISH, ticket, nbytes, run_id, status, response, last_seq, now)``
- ``(CANCEL, ticket, 0, run_id, now)``
- ``(JOB, ticket, 0, fn, token)``: ``fn(conn)`` runs under a savepoint; its result (or
  exception) is reported with ``token``.
"""

MAX_BATCH = 16_384
"""Ops committed in one transaction at most (bounds one commit's latency and memory)."""

INSERT_EVENT = (
    "INSERT INTO events(run, seq, node_id, phase, payload, payload_hash, output, "
    "output_hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(run, seq) DO NOTHING"
)
INSERT_PLAIN_EVENT = (
    "INSERT INTO events(run, seq, node_id, phase, payload) VALUES (?, ?, ?, ?, ?) "
    "ON CONFLICT(run, seq) DO NOTHING"
)
"""The common row (an inline frame, no output kept beside it): binding the three NULL
columns of :data:`INSERT_EVENT` costs the writer about a quarter of its time per event."""
PLAIN_ROWS = 64
"""Plain event rows inserted by one statement (:data:`INSERT_PLAIN_EVENTS`)."""
PLAIN_COLUMNS = 5
"""Values of one plain row (run, seq, node_id, phase, payload)."""


def plain_events_sql(rows: int) -> str:
    """:data:`INSERT_PLAIN_EVENT` for ``rows`` rows in one statement."""
    return ("INSERT INTO events(run, seq, node_id, phase, payload) VALUES "
            + ", ".join(["(?, ?, ?, ?, ?)"] * rows) + " ON CONFLICT(run, seq) DO NOTHING")


INSERT_PLAIN_EVENTS = plain_events_sql(PLAIN_ROWS)
""":data:`PLAIN_ROWS` rows of :data:`INSERT_PLAIN_EVENT` in one statement: one step of
the SQLite VM, so the thread releases and takes back the interpreter lock once per
:data:`PLAIN_ROWS` rows, not per row (executemany steps once per row, and each step hands
the lock to a busy event loop, to wait for it again): ~30 % less CPU per row, and a
batch's commit no longer crawls while the loop is busy."""
RUN_KEY = "SELECT id FROM runs WHERE run_id = ?"

MAX_KEYS = 100_000
"""``run_id`` → ``runs.id`` the writer remembers at most (then forgets them all)."""
INSERT_BLOB = "INSERT OR IGNORE INTO blobs(sha256, bytes) VALUES (?, ?)"
INSERT_RUN = (
    "INSERT OR IGNORE INTO runs(run_id, principal, req_id, chain_id, status, request, "
    "plan_hash, last_seq, owner, epoch, cancel_requested, deadline, created, updated, "
    "response, idempotency_key, retention_until) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
FINISH_RUN = (
    "UPDATE runs SET status = ?1, response = ?2, last_seq = max(last_seq, ?3), updated = ?4, "
    "retention_until = ?4 + (retention_until - created) "
    "WHERE run_id = ?5 AND status = 'running'"
)
"""The retention window (``retention_until - created`` as created) counts from the end."""
CANCEL_RUN = (
    "UPDATE runs SET cancel_requested = 1, updated = ? "
    "WHERE run_id = ? AND status = 'running'"
)

Report = Callable[[int, int, list[tuple[Any, bool, Any]], BaseException | None], None]
"""``report(committed_ticket, committed_bytes, job_results, error)``: called by the
thread after each commit (``error`` None) or once when it breaks (``error`` set;
``job_results`` then holds the failed jobs)."""


class Writer:
    """The one writing thread of a store.

    Args:
        conn: the writing connection (WAL, migrated), used by this thread only from now.
        report: see :data:`Report`; must not block (it hops to the loop).
        log: a structlog logger.
        blob_threshold: frames and outputs of more bytes go to ``blobs``.
        commit_delay: seconds to wait after the first op of a batch for more to join.
    """

    def __init__(self, conn: sqlite3.Connection, report: Report, log: Any, *,
                 blob_threshold: int, commit_delay: float) -> None:
        self.cond = threading.Condition(threading.Lock())
        self.queue: deque[tuple[Any, ...]] = deque()  # appended by the loop without a lock
        self.max_batch = MAX_BATCH
        self.idle = False  # waiting for ops: a put must wake it
        self.delaying = False  # waiting out the commit delay: a full batch wakes it
        self.closing = False
        self.hurry_ticket = 0  # ops up to this ticket are awaited: no commit delay for them
        self._conn = conn
        self._report = report
        self._log = log
        self._threshold = blob_threshold
        self._delay = commit_delay
        self._thread = threading.Thread(target=self._main, name="a2e-store-writer", daemon=True)
        self._keys: dict[str, int] = {}  # run_id → runs.id of runs being appended to
        self._unknown: set[str] = set()  # run_ids of dropped frames in this batch
        self._small: dict[int, str] = {}  # rows → plain_events_sql(rows), rows <= PLAIN_ROWS

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        """Wait for the thread to end (after :meth:`close`)."""
        self._thread.join()

    def wake(self) -> None:
        """A put found the thread waiting (:attr:`idle`, or :attr:`delaying` with a full
        batch queued): wake it. Called by the loop after appending to :attr:`queue`."""
        with self.cond:
            self.cond.notify()

    def hurry(self, ticket: int) -> None:
        """Commit the ops up to ``ticket`` without waiting out the commit delay (a flush,
        an awaited write)."""
        with self.cond:
            self.hurry_ticket = max(self.hurry_ticket, ticket)
            self.cond.notify()

    def close(self) -> None:
        """Commit what is queued, then end the thread."""
        with self.cond:
            self.closing = True
            self.cond.notify()

    # ── the thread ──────────────────────────────────────────────────────────

    def _take(self) -> list[tuple[Any, ...]] | None:
        """The next batch, or None when closing and nothing is left.

        The loop appends to the deque without a lock and wakes the thread only when it
        says it waits: the thread sets :attr:`idle` under the condition *before* looking
        at the queue once more, so an op appended meanwhile is either seen or woken for.
        """
        queue = self.queue
        if not queue:
            with self.cond:
                self.idle = True
                while not queue and not self.closing:
                    self.cond.wait()
                self.idle = False
                if not queue:
                    return None
        if self._delay > 0 and not self.closing and queue[0][1] > self.hurry_ticket:
            deadline = time.monotonic() + self._delay
            with self.cond:
                self.delaying = True
                while (len(queue) < self.max_batch and not self.closing
                       and queue[0][1] > self.hurry_ticket):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self.cond.wait(left)
                self.delaying = False
        popleft = queue.popleft
        return [popleft() for _ in range(min(len(queue), self.max_batch))]

    def _main(self) -> None:
        conn = self._conn
        try:
            while (batch := self._take()) is not None:
                try:
                    results = self._apply(batch)
                except BaseException as exc:
                    if conn.in_transaction:
                        try:
                            conn.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
                    self._log.error("the run store failed; no more writes are stored",
                                    exc_info=exc)
                    with self.cond:
                        dropped = list(self.queue)
                        self.queue.clear()
                        self.closing = True
                    jobs = [(op[4], False, exc) for op in batch + dropped if op[0] == JOB]
                    self._report(0, 0, jobs, exc)
                    return
                self._report(batch[-1][1], sum(op[2] for op in batch), results, None)
        finally:
            conn.close()

    @staticmethod
    def _blob(data: bytes, blobs: list[tuple[bytes, bytes]]) -> tuple[None, bytes]:
        """``(None, hash)`` for a frame or output over the threshold, queued for ``blobs``."""
        digest = hashlib.sha256(data).digest()
        blobs.append((digest, data))
        return None, digest

    def _apply(self, batch: list[tuple[Any, ...]]) -> list[tuple[Any, bool, Any]]:
        """Apply ``batch`` in one transaction and commit it.

        Returns:
            ``(token, ok, result_or_exception)`` of every job in it.
        """
        conn = self._conn
        if len(batch) <= PLAIN_ROWS and self._apply_small(batch):
            return []
        results: list[tuple[Any, bool, Any]] = []
        rows: list[tuple[Any, ...]] = []  # every column of INSERT_EVENT
        plain: list[Any] = []  # the columns of INSERT_PLAIN_EVENT, row after row, flat
        blobs: list[tuple[bytes, bytes]] = []
        keys = self._keys
        threshold = self._threshold
        self._unknown.clear()
        conn.execute("BEGIN IMMEDIATE")
        for op in batch:
            kind = op[0]
            if kind == APPEND:
                run = keys.get(op[3])
                if run is None:
                    run = self._key(op[3], op[4])
                    if run is None:
                        continue
                frame = op[7]
                output = op[8]
                if output is None and len(frame) <= threshold:
                    plain.append(run)
                    plain += op[4:8]  # seq, node_id, phase, frame: no tuple per row
                    continue
                frame_hash = None
                if len(frame) > threshold:
                    frame, frame_hash = self._blob(frame, blobs)
                output_hash = None
                if output is not None and len(output) > threshold:
                    output, output_hash = self._blob(output, blobs)
                rows.append((run, op[4], op[5], op[6], frame, frame_hash, output, output_hash))
                continue
            if rows or plain:
                self._insert_events(rows, plain, blobs)
                rows, plain, blobs = [], [], []
            if kind == CREATE:
                cursor = conn.execute(INSERT_RUN, op[3])
                if cursor.rowcount == 0:
                    self._log.error("a run was not stored: its run_id, or its principal's "
                                    "idempotency key, is taken", run_id=op[3][0])
                elif cursor.lastrowid is not None:
                    if len(keys) >= MAX_KEYS:
                        keys.clear()
                    keys[op[3][0]] = cursor.lastrowid
            elif kind == FINISH:
                _, _, _, run_id, status, response, last_seq, now = op
                conn.execute(FINISH_RUN, (status, response, last_seq, now, run_id))
                keys.pop(run_id, None)
            elif kind == CANCEL:
                conn.execute(CANCEL_RUN, (op[4], op[3]))
            else:
                results.append(self._job(op[3], op[4]))
        if rows or plain:
            self._insert_events(rows, plain, blobs)
        conn.execute("COMMIT")
        return results

    def _apply_small(self, batch: list[tuple[Any, ...]]) -> bool:
        """Commit a small batch of plain rows of known runs (the usual batch of a chain
        whose nodes wait for their ``start`` to be committed: a frame or two) as ONE
        statement, its own transaction (the connection is in autocommit mode): one step
        of the SQLite VM, so the thread gives up the interpreter lock once, not for a
        BEGIN, each row and a COMMIT. False (nothing done) for any other batch."""
        keys = self._keys
        threshold = self._threshold
        flat: list[Any] = []
        for op in batch:
            if op[0] != APPEND or op[8] is not None or len(op[7]) > threshold:
                return False
            run = keys.get(op[3])
            if run is None:
                return False
            flat.append(run)
            flat += op[4:8]
        sql = self._small.get(len(batch))
        if sql is None:
            sql = self._small[len(batch)] = plain_events_sql(len(batch))
        written = self._conn.execute(sql, flat).rowcount
        if written != len(batch):
            self._log.error("frames were not stored twice: their (run, seq) is stored "
                            "already", duplicates=len(batch) - written)
        return True

    def _key(self, run_id: str, seq: int) -> int | None:
        """``runs.id`` of a run the writer did not create (a resumed run, one made by
        ``create_or_get``), remembered from now; None (the frame is dropped, logged)
        when no such run is stored: frames belong to a created run."""
        row = self._conn.execute(RUN_KEY, (run_id,)).fetchone()
        if row is None:
            if run_id not in self._unknown:  # once per run and batch, not per frame
                self._unknown.add(run_id)
                self._log.error("frames of an unknown run were not stored; create the run "
                                "before its frames", run_id=run_id, seq=seq)
            return None
        if len(self._keys) >= MAX_KEYS:
            self._keys.clear()
        self._keys[run_id] = row[0]
        return int(row[0])

    def _insert_events(self, rows: list[tuple[Any, ...]], plain: list[Any],
                       blobs: list[tuple[bytes, bytes]]) -> None:
        """Insert the events of ``rows`` (every column) and ``plain`` (inline frame, no
        output: :data:`PLAIN_COLUMNS` values a row, flat); the order of rows within one
        transaction does not matter (readers order by ``seq``)."""
        conn = self._conn
        if blobs:
            conn.executemany(INSERT_BLOB, blobs)
        written = 0
        wanted = len(rows) + len(plain) // PLAIN_COLUMNS
        if plain:
            step = PLAIN_ROWS * PLAIN_COLUMNS
            whole = len(plain) - len(plain) % step
            for start in range(0, whole, step):
                written += conn.execute(INSERT_PLAIN_EVENTS, plain[start:start + step]).rowcount
            if whole < len(plain):
                rest = iter(plain[whole:])
                written += conn.executemany(INSERT_PLAIN_EVENT, zip(
                    rest, rest, rest, rest, rest, strict=True)).rowcount
        if rows:
            written += conn.executemany(INSERT_EVENT, rows).rowcount
        if written != wanted:
            self._log.error("frames were not stored twice: their (run, seq) is stored "
                            "already", duplicates=wanted - written)

    def _job(self, fn: Callable[[sqlite3.Connection], Any], token: Any
             ) -> tuple[Any, bool, Any]:
        conn = self._conn
        conn.execute("SAVEPOINT job")
        try:
            result = fn(conn)
        except Exception as exc:
            conn.execute("ROLLBACK TO job")
            conn.execute("RELEASE job")
            return token, False, exc
        conn.execute("RELEASE job")
        return token, True, result
