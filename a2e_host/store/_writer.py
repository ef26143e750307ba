"""The SQLite run store's writer thread: group commit of everything queued.

Layer: store backend (stdlib ``sqlite3`` and ``threading``, msgspec; no anyio, no event
loop). The store's loop side appends *ops* (plain tuples, the cheapest thing to build per
event) to a deque, without a lock; this thread takes everything queued (at most
:data:`MAX_BATCH` ops), applies it in one transaction, commits, and reports the highest
committed ticket back through ``report`` (which hops to the loop). The frames of one run
that follow each other in a batch are written as one ``segments`` row
(:data:`INSERT_SEGMENT`), not a row each. Awaited *jobs* (create-or-get, claim, prune) run
inside the same transaction, each under a savepoint,
so one failing job fails alone; their results travel with the commit report, so a
caller never sees a result that is not committed.

A batch that cannot be committed (an I/O error, a full disk) is rolled back and breaks
the store: the thread reports the error and stops; nothing queued after it is written.
"""

from __future__ import annotations

import hashlib
import operator
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ._checkpointer import BACKSTOP_PAGES, CHECKPOINT_BYTES, Checkpointer
from ._schema import PAGE_SIZE
from ._segment_rows import (
    ROWS_PER_STATEMENT,
    SEGMENT_FRAMES,
    insert_segments,
    none_for_blobs,
    segment_rows,
)

__all__ = ["Writer", "APPEND", "CREATE", "FINISH", "CANCEL", "JOB", "MAX_BATCH",
           "SEGMENT_FRAMES"]

APPEND, CREATE, FINISH, CANCEL, JOB = range(5)
"""Op kinds, the first item of each op tuple:

- ``(APPEND, ticket, nbytes, run_id, first_seq, items)``: consecutive frames of one run,
  ``items`` a list of ``(node_id, phase, frame, output)`` with ``seq`` ``first_seq``,
  ``first_seq + 1``, …; ``nbytes`` their frame and output bytes
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
"""A frame stored as a row of its own: its frame or output is over the blob threshold,
or it was appended at or below its run's last stored ``seq`` (and is not stored)."""
NO_SEQ = -(2**63)
"""The last stored ``seq`` of a run with no frame stored."""
RUN_KEY = "SELECT id FROM runs WHERE run_id = ?"
RUN_TAIL = (
    "SELECT max(coalesce((SELECT max(seq) FROM events WHERE run = ?1), ?2), "
    "coalesce((SELECT max(last_seq) FROM segments WHERE run = ?1), ?2))"
)
IN_SEGMENT = (
    "SELECT first_seq <= ?2 FROM segments WHERE run = ?1 AND last_seq >= ?2 "
    "ORDER BY last_seq LIMIT 1"
)
IN_EVENTS = "SELECT 1 FROM events WHERE run = ?1 AND seq = ?2"

MAX_KEYS = 100_000
"""Runs the writer remembers (``run_id`` → ``runs.id`` and last stored ``seq``) at most
(then forgets them all before its next batch; one batch may add :data:`MAX_BATCH`)."""
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

_nbytes = operator.itemgetter(2)
"""An op's byte count (summed per batch in C, not a generator step per op)."""
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
        path: the database file: its WAL is checkpointed by a thread of its own
            (:mod:`._checkpointer`); None: by the writer's commits, as SQLite does.
    """

    def __init__(self, conn: sqlite3.Connection, report: Report, log: Any, *,
                 blob_threshold: int, commit_delay: float, path: str | None = None) -> None:
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
        # run_id → [runs.id, last stored seq] of the runs being appended to: the seq
        # each run's next segment must begin after (the duplicate backstop)
        self._keys: dict[str, list[int]] = {}
        self._unknown: set[str] = set()  # run_ids of dropped frames in this batch
        self._begun = False  # the batch's transaction is open
        self._duplicates = 0  # frames of this batch stored already (logged once)
        self._path = path
        self._checkpointer: Checkpointer | None = None
        self._unchecked = 0  # bytes committed since the last checkpoint was asked

    def _error(self, event: str, **fields: Any) -> None:
        """Log an error; a failing logger must not end the thread (writes would hang)."""
        try:
            self._log.error(event, **fields)
        except Exception:  # noqa: BLE001 — the write goes on; the log line is lost
            pass

    def start(self) -> None:
        if self._path is not None:
            self._conn.execute(f"PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES}")
            self._checkpointer = Checkpointer(self._path, self._log)
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
                    self._error("the run store failed; no more writes are stored",
                                exc_info=exc)
                    with self.cond:
                        dropped = list(self.queue)
                        self.queue.clear()
                        self.closing = True
                    jobs = [(op[4], False, exc) for op in batch + dropped if op[0] == JOB]
                    self._report(0, 0, jobs, exc)
                    return
                nbytes = sum(map(_nbytes, batch))
                self._report(batch[-1][1], nbytes, results, None)
                if self._checkpointer is not None:
                    self._unchecked += nbytes + PAGE_SIZE  # a commit writes a page or more
                    if self._unchecked >= CHECKPOINT_BYTES:
                        self._unchecked = 0
                        self._checkpointer.request()
        finally:
            if self._checkpointer is not None:
                self._checkpointer.close()
            conn.close()

    @staticmethod
    def _blob(data: bytes, blobs: list[tuple[bytes, bytes]]) -> tuple[None, bytes]:
        """``(None, hash)`` for a frame or output over the threshold, queued for ``blobs``."""
        digest = hashlib.sha256(data).digest()
        blobs.append((digest, data))
        return None, digest

    def _begin(self) -> None:
        if not self._begun:
            self._conn.execute("BEGIN IMMEDIATE")
            self._begun = True

    def _apply(self, batch: list[tuple[Any, ...]]) -> list[tuple[Any, bool, Any]]:
        """Apply ``batch`` in one transaction and commit it.

        The frames of a run that follow its last stored ``seq`` one by one go into one
        segment row (:data:`INSERT_SEGMENT`); a frame that cannot (a frame or output over
        the blob threshold, a frame at or below the run's last stored ``seq``) is a row of
        ``events``, the latter only when its ``seq`` is not stored yet (the duplicate
        backstop: a ``seq`` is stored once). A batch that comes down to one statement
        (the usual batch of a chain whose nodes wait for their ``start`` to commit: a
        frame or two of one run) runs it alone in autocommit mode: one step of the SQLite
        VM, one release of the interpreter lock.

        Returns:
            ``(token, ok, result_or_exception)`` of every job in it.
        """
        keys = self._keys
        if len(keys) >= MAX_KEYS:
            # forgotten between batches only: a run's last seq must count the frames of
            # this batch not inserted yet, which the file does not have
            keys.clear()
        elif self._apply_run(batch):
            return []
        conn = self._conn
        results: list[tuple[Any, bool, Any]] = []
        rows: list[tuple[Any, ...]] = []  # INSERT_EVENT rows
        blobs: list[tuple[bytes, bytes]] = []
        building: dict[str, list[Any]] = {}  # run_id → [run, first_seq, items]
        built: list[list[Any]] = []  # closed segments
        self._unknown.clear()
        self._begun = False
        self._duplicates = 0
        for op in batch:
            if op[0] == APPEND:
                run_id = op[3]
                entry = keys.get(run_id)
                if entry is None:
                    entry = self._key(run_id, op[4])
                    if entry is None:
                        continue
                self._gather(entry, run_id, op, rows, blobs, building, built)
                continue
            self._write(rows, blobs, building, built)
            kind = op[0]
            if kind == CREATE:
                cursor = conn.execute(INSERT_RUN, op[3])
                if cursor.rowcount == 0:
                    self._error("a run was not stored: its run_id, or its principal's "
                                "idempotency key, is taken", run_id=op[3][0])
                elif cursor.lastrowid is not None:
                    keys[op[3][0]] = [cursor.lastrowid, NO_SEQ]
            elif kind == FINISH:
                _, _, _, run_id, status, response, last_seq, now = op
                conn.execute(FINISH_RUN, (status, response, last_seq, now, run_id))
                keys.pop(run_id, None)
            elif kind == CANCEL:
                conn.execute(CANCEL_RUN, (op[4], op[3]))
            else:
                results.append(self._job(op[3], op[4]))
        if (not self._begun and not rows and not built and len(building) == 1
                and len(next(iter(building.values()))[2])
                <= SEGMENT_FRAMES * ROWS_PER_STATEMENT):
            for run, first, items in building.values():  # one statement: autocommit
                insert_segments(conn, segment_rows(run, first, items))
        elif rows or built or building:
            self._write(rows, blobs, building, built)
        if self._begun:
            conn.execute("COMMIT")
        if self._duplicates:
            self._error("frames were not stored twice: their (run, seq) is stored "
                        "already", duplicates=self._duplicates)
        return results

    def _apply_run(self, batch: list[tuple[Any, ...]]) -> bool:
        """Commit a batch that is only the next frames of one known run, none for blobs
        (a busy run's usual batch: a group of frames per loop tick), with no step per
        frame: its segments (one multi-row statement in autocommit mode, when they fit
        one). False (nothing done) for any other batch."""
        first = batch[0]
        if first[0] != APPEND:
            return False
        run_id = first[3]
        entry = self._keys.get(run_id)
        if entry is None:
            return False
        start = expected = entry[1] + 1
        for op in batch:  # cheap checks first: a batch ending the run fails here
            if op[0] != APPEND or op[3] != run_id or op[4] != expected:
                return False
            expected += len(op[5])
        threshold = self._threshold
        items: list[Any] = []
        for op in batch:
            if op[2] > threshold and not none_for_blobs(op[5], threshold):
                return False
            items += op[5]
        segments = segment_rows(entry[0], start, items)
        conn = self._conn
        if not segments:  # appends of no frames
            return True
        if len(segments) <= ROWS_PER_STATEMENT:
            insert_segments(conn, segments)  # one statement: autocommit
        else:
            conn.execute("BEGIN IMMEDIATE")
            insert_segments(conn, segments)
            conn.execute("COMMIT")
        entry[1] = expected - 1
        return True

    def _gather(self, entry: list[int], run_id: str, op: tuple[Any, ...],
                rows: list[tuple[Any, ...]], blobs: list[tuple[bytes, bytes]],
                building: dict[str, list[Any]], built: list[list[Any]]) -> None:
        """Gather the frames of one append op (``entry``: its run's ``[runs.id, last
        stored seq]``) into the run's segment, or as ``events`` rows (see :meth:`_apply`)."""
        threshold = self._threshold
        seq, items = op[4], op[5]
        if not items:  # an append of no frames: nothing to gather
            return
        if seq == entry[1] + 1 and (op[2] <= threshold or none_for_blobs(items, threshold)):
            # the next frames, none for blobs: into the run's segment at once
            entry[1] = seq + len(items) - 1
            segment = building.get(run_id)
            if segment is None:
                building[run_id] = [entry[0], seq, list(items)]
            else:
                segment[2] += items
            return
        for item in items:
            frame, output = item[2], item[3]
            small = len(frame) <= threshold and (output is None or len(output) <= threshold)
            if seq == entry[1] + 1 and small:  # the next frame: into the run's segment
                entry[1] = seq
                segment = building.get(run_id)
                if segment is None:
                    building[run_id] = [entry[0], seq, [item]]
                else:
                    segment[2].append(item)
            else:
                segment = building.pop(run_id, None)
                if segment is not None:
                    built.append(segment)
                if seq > entry[1]:  # after a gap, or a frame for blobs
                    entry[1] = seq
                    if small:
                        building[run_id] = [entry[0], seq, [item]]
                    else:
                        rows.append(self._row(entry[0], seq, item, blobs))
                else:
                    # at or below the run's last stored seq: stored already, or out of order
                    self._write(rows, blobs, building, built)
                    if self._stored(entry[0], seq):
                        self._duplicates += 1
                    else:
                        rows.append(self._row(entry[0], seq, item, blobs))
            seq += 1

    def _row(self, run: int, seq: int, item: tuple[Any, ...],
             blobs: list[tuple[bytes, bytes]]) -> tuple[Any, ...]:
        """The :data:`INSERT_EVENT` row of frame ``seq``, ``item`` its ``(node_id, phase,
        frame, output)`` (its big frame and output, if any, queued for ``blobs``)."""
        frame, output = item[2], item[3]
        frame_hash = output_hash = None
        if len(frame) > self._threshold:
            frame, frame_hash = self._blob(frame, blobs)
        if output is not None and len(output) > self._threshold:
            output, output_hash = self._blob(output, blobs)
        return (run, seq, item[0], item[1], frame, frame_hash, output, output_hash)

    def _stored(self, run: int, seq: int) -> bool:
        """Whether ``seq`` of ``run`` is stored (in the open transaction)."""
        conn = self._conn
        found = conn.execute(IN_SEGMENT, (run, seq)).fetchone()
        if found is not None and found[0]:
            return True
        return conn.execute(IN_EVENTS, (run, seq)).fetchone() is not None

    def _write(self, rows: list[tuple[Any, ...]], blobs: list[tuple[bytes, bytes]],
               building: dict[str, list[Any]], built: list[list[Any]]) -> None:
        """Begin the transaction (when not yet) and insert what was gathered (emptying
        the four collections); a row whose ``seq`` is stored already is counted in
        :attr:`_duplicates`."""
        self._begin()
        if not (rows or built or building):
            return
        conn = self._conn
        if blobs:
            conn.executemany(INSERT_BLOB, blobs)
            blobs.clear()
        built += building.values()
        building.clear()
        if built:
            insert_segments(conn, [segment for run, first, items in built
                                   for segment in segment_rows(run, first, items)])
            built.clear()
        if rows:
            self._duplicates += len(rows) - conn.executemany(INSERT_EVENT, rows).rowcount
            rows.clear()

    def _key(self, run_id: str, seq: int) -> list[int] | None:
        """``[runs.id, last stored seq]`` of a run the writer did not create (a resumed
        run, one made by ``create_or_get``), remembered from now; None (the frame is
        dropped, logged) when no such run is stored: frames belong to a created run."""
        conn = self._conn
        row = conn.execute(RUN_KEY, (run_id,)).fetchone()
        if row is None:
            if run_id not in self._unknown:  # once per run and batch, not per frame
                self._unknown.add(run_id)
                self._error("frames of an unknown run were not stored; create the run "
                            "before its frames", run_id=run_id, seq=seq)
            return None
        run = int(row[0])
        tail = conn.execute(RUN_TAIL, (run, NO_SEQ)).fetchone()[0]
        entry = self._keys[run_id] = [run, int(tail)]
        return entry

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
