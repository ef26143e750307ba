"""The SQLite run store's writer thread: group commit of everything queued.

Layer: store backend (stdlib ``sqlite3`` and ``threading``, no anyio, no event loop).
The store's loop side puts *ops* (plain tuples, the cheapest thing to build per event) on
a list under a condition; this thread takes everything queued (at most
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
        self.queue: list[tuple[Any, ...]] = []
        self.closing = False
        self.hurried = False  # someone awaits a commit: skip the commit delay once
        self._conn = conn
        self._report = report
        self._log = log
        self._threshold = blob_threshold
        self._delay = commit_delay
        self._thread = threading.Thread(target=self._main, name="a2e-store-writer", daemon=True)
        self._keys: dict[str, int] = {}  # run_id → runs.id of runs being appended to

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        """Wait for the thread to end (after :meth:`close`)."""
        self._thread.join()

    def hurry(self) -> None:
        """Commit what is queued without waiting out the commit delay (a flush, a job)."""
        with self.cond:
            self.hurried = True
            self.cond.notify()

    def close(self) -> None:
        """Commit what is queued, then end the thread."""
        with self.cond:
            self.closing = True
            self.cond.notify()

    # ── the thread ──────────────────────────────────────────────────────────

    def _take(self) -> list[tuple[Any, ...]] | None:
        """The next batch, or None when closing and nothing is left."""
        with self.cond:
            while not self.queue:
                if self.closing:
                    return None
                self.cond.wait()
            if self._delay > 0 and not self.closing:
                deadline = time.monotonic() + self._delay
                while len(self.queue) < MAX_BATCH and not (self.closing or self.hurried):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self.cond.wait(left)
            self.hurried = False
            queue = self.queue
            if len(queue) <= MAX_BATCH:
                self.queue = []
                return queue
            self.queue = queue[MAX_BATCH:]
            return queue[:MAX_BATCH]

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
                        dropped, self.queue = self.queue, []
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
        results: list[tuple[Any, bool, Any]] = []
        rows: list[tuple[Any, ...]] = []
        blobs: list[tuple[bytes, bytes]] = []
        keys = self._keys
        threshold = self._threshold
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
                frame_hash = None
                if len(frame) > threshold:
                    frame, frame_hash = self._blob(frame, blobs)
                output = op[8]
                output_hash = None
                if output is not None and len(output) > threshold:
                    output, output_hash = self._blob(output, blobs)
                rows.append((run, op[4], op[5], op[6], frame, frame_hash, output, output_hash))
                continue
            if rows:
                self._insert_events(rows, blobs)
                rows, blobs = [], []
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
        if rows:
            self._insert_events(rows, blobs)
        conn.execute("COMMIT")
        return results

    def _key(self, run_id: str, seq: int) -> int | None:
        """``runs.id`` of a run the writer did not create (a resumed run, one made by
        ``create_or_get``), remembered from now; None (the frame is dropped, logged)
        when no such run is stored: frames belong to a created run."""
        row = self._conn.execute(RUN_KEY, (run_id,)).fetchone()
        if row is None:
            self._log.error("a frame of an unknown run was not stored; create the run "
                            "before its frames", run_id=run_id, seq=seq)
            return None
        if len(self._keys) >= MAX_KEYS:
            self._keys.clear()
        self._keys[run_id] = row[0]
        return int(row[0])

    def _insert_events(self, rows: list[tuple[Any, ...]],
                       blobs: list[tuple[bytes, bytes]]) -> None:
        conn = self._conn
        if blobs:
            conn.executemany(INSERT_BLOB, blobs)
        written = conn.executemany(INSERT_EVENT, rows).rowcount
        if written != len(rows):
            self._log.error("frames were not stored twice: their (run, seq) is stored "
                            "already", duplicates=len(rows) - written)

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
