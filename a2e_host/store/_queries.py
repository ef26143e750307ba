"""The SQLite run store's reads and awaited jobs: plain functions of a connection.

Layer: store backend (stdlib ``sqlite3``, no anyio). Reads run in a worker thread on the
reading connection; jobs (:func:`create_or_get`, :func:`claim`, :func:`prune`) run in the
writer thread inside its batch transaction.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from typing import Any

import msgspec

from . import RunRecord, RunStatus, StoredFrame, StoreError
from ._writer import INSERT_RUN

__all__ = [
    "record_row", "get", "by_idempotency_key", "list_runs", "frames", "unfinished",
    "create_or_get", "claim", "prune", "PRUNE_EVENTS_PER_CALL", "MAX_SEQ",
]

PRUNE_EVENTS_PER_CALL = 20_000
"""Events one :func:`prune` call deletes at most (bounded work per retention tick)."""

_LAST_SEQ = (
    "max(last_seq, coalesce((SELECT max(seq) FROM events e WHERE e.run = runs.id), 0)"
    "{segments})"
)
_SEGMENTS_LAST = (
    ", coalesce((SELECT max(s.last_seq) FROM segments s WHERE s.run = runs.id), 0)"
)
_RECORD = (
    "SELECT run_id, principal, req_id, chain_id, status, request, plan_hash, "
    + _LAST_SEQ + ", owner, epoch, cancel_requested, deadline, created, updated, response, "
    "idempotency_key, retention_until, id FROM runs"
)

_LISTED = (
    "SELECT run_id, principal, req_id, chain_id, status, x'', plan_hash, "
    + _LAST_SEQ + ", owner, epoch, cancel_requested, deadline, created, updated, NULL, "
    "idempotency_key, retention_until, id FROM runs"
)
""":data:`_RECORD` without the request and response bodies (up to a message each): a
page of up to 1000 runs must not read them into memory (``RunStore.list``)."""

_HAS_SEGMENTS = "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'segments'"

_ROWS = (
    "SELECT e.seq, e.node_id, e.phase, coalesce(e.payload, bp.bytes), "
    "coalesce(e.output, bo.bytes) FROM events e "
    "LEFT JOIN blobs bp ON bp.sha256 = e.payload_hash "
    "LEFT JOIN blobs bo ON bo.sha256 = e.output_hash "
    "WHERE e.run = ? AND e.seq > ? ORDER BY e.seq LIMIT ?"
)
_SEGMENTS = (
    "SELECT first_seq, frames FROM segments WHERE run = ? AND last_seq > ? ORDER BY last_seq"
)

_decode_items = msgspec.msgpack.Decoder().decode

_CURSOR = re.compile(r"r([0-9]{1,19})")
_MAX_ROWID = 2**63 - 1  # a larger cursor is none this store made (and not an SQLite int)
MAX_SEQ = 2**63 - 1
"""The largest ``seq`` (or frame count) an SQLite integer holds."""


def record_row(record: RunRecord) -> tuple[Any, ...]:
    """The ``runs`` columns of ``record``, in :data:`~._writer.INSERT_RUN` order."""
    return (
        record.run_id, record.principal, record.req_id, record.chain_id,
        str(record.status.value), record.request, record.plan_hash, record.last_seq,
        record.owner, record.epoch, int(record.cancel_requested), record.deadline,
        record.created, record.updated, record.response, record.idempotency_key,
        record.retention_until,
    )


def _record(row: Sequence[Any]) -> RunRecord:
    return RunRecord(
        run_id=row[0], principal=row[1], req_id=row[2], chain_id=row[3],
        status=RunStatus(row[4]), request=bytes(row[5]), plan_hash=row[6],
        last_seq=int(row[7]), owner=row[8], epoch=int(row[9]),
        cancel_requested=bool(row[10]), deadline=row[11], created=row[12],
        updated=row[13], response=None if row[14] is None else bytes(row[14]),
        idempotency_key=row[15], retention_until=row[16],
    )


def _segmented(conn: sqlite3.Connection) -> bool:
    """Whether the file has ``segments`` (schema version 2; a version 1 file opened
    read-only, beside an older host, has not)."""
    return bool(conn.execute(_HAS_SEGMENTS).fetchone()[0])


def _sql(conn: sqlite3.Connection, sql: str) -> str:
    """``sql`` (:data:`_RECORD` or :data:`_LISTED`) for this file's schema."""
    return sql.format(segments=_SEGMENTS_LAST if _segmented(conn) else "")


def get(conn: sqlite3.Connection, run_id: str) -> RunRecord | None:
    row = conn.execute(_sql(conn, _RECORD) + " WHERE run_id = ?", (run_id,)).fetchone()
    return None if row is None else _record(row)


def by_idempotency_key(conn: sqlite3.Connection, principal: str, key: str
                       ) -> RunRecord | None:
    row = conn.execute(_sql(conn, _RECORD) + " WHERE principal = ? AND idempotency_key = ?",
                       (principal, key)).fetchone()
    return None if row is None else _record(row)


def list_runs(
    conn: sqlite3.Connection,
    *,
    principal: str | None,
    statuses: Sequence[str] | None,
    cursor: str | None,
    limit: int,
) -> tuple[list[RunRecord], str | None]:
    """Runs newest first (by ``id``), after ``cursor``; see ``RunStore.list``.

    Raises:
        ValueError: a malformed cursor, or ``limit`` outside 1–1000.
    """
    if not 1 <= limit <= 1000:
        raise ValueError(f"limit must be between 1 and 1000, got {limit}")
    where: list[str] = []
    params: list[Any] = []
    if cursor is not None:
        match = _CURSOR.fullmatch(cursor)
        if match is None or int(match.group(1)) > _MAX_ROWID:
            raise ValueError(f"cursor {cursor[:40]!r} is not one this store made; pass the "
                             "next_cursor of the previous page, or none for the first page")
        where.append("id < ?")
        params.append(int(match.group(1)))
    if principal is not None:
        where.append("principal = ?")
        params.append(principal)
    if statuses is not None:
        where.append(f"status IN ({', '.join('?' * len(statuses))})")
        params.extend(statuses)
    sql = _sql(conn, _LISTED) + (" WHERE " + " AND ".join(where) if where else "")
    rows = conn.execute(sql + " ORDER BY id DESC LIMIT ?", (*params, limit + 1)).fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
    return [_record(r) for r in rows], (f"r{rows[-1][17]}" if more else None)


def frames(conn: sqlite3.Connection, run_id: str, after: int, limit: int) -> list[StoredFrame]:
    """The run's frames with ``seq > after``, at most ``limit``, in ``seq`` order: its
    ``events`` rows merged with the frames of its segments (a page may begin or end
    inside a segment; a segment is decoded whole, at most :data:`~._segment_rows.SEGMENT_FRAMES`
    frames). Read in one transaction, so from one snapshot: a batch the writer commits
    between the two queries (a big frame's row, a segment after it) would otherwise show
    its segment without the row, and the page would skip that ``seq``."""
    if conn.in_transaction:
        return _frames(conn, run_id, after, limit)
    conn.execute("BEGIN")
    try:
        return _frames(conn, run_id, after, limit)
    finally:
        conn.execute("COMMIT")


def _frames(conn: sqlite3.Connection, run_id: str, after: int, limit: int
            ) -> list[StoredFrame]:
    key = conn.execute("SELECT id FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    if key is None:
        return []
    run = key[0]
    rows = [StoredFrame(seq, node_id, phase, bytes(frame),
                        None if output is None else bytes(output))
            for seq, node_id, phase, frame, output in conn.execute(_ROWS, (run, after, limit))]
    if not _segmented(conn):
        return rows
    got: list[StoredFrame] = []
    at = 0  # the next of ``rows``
    cursor = conn.execute(_SEGMENTS, (run, after))
    try:
        for first, data in cursor:
            items = _decode_items(data)
            seq = max(first, after + 1)
            for node_id, phase, frame, output in items[seq - first:]:
                while at < len(rows) and rows[at].seq < seq:
                    got.append(rows[at])
                    at += 1
                    if len(got) == limit:
                        return got
                got.append(StoredFrame(seq, node_id, phase, frame, output))
                if len(got) == limit:
                    return got
                seq += 1
    finally:
        cursor.close()
    return got + rows[at:at + limit - len(got)]


def unfinished(conn: sqlite3.Connection) -> list[RunRecord]:
    rows = conn.execute(_sql(conn, _RECORD) + " WHERE status = 'running' ORDER BY id"
                        ).fetchall()
    return [_record(r) for r in rows]


# ── jobs: in the writer thread, inside its transaction ─────────────────────


def create_or_get(conn: sqlite3.Connection, record: RunRecord) -> tuple[RunRecord, bool]:
    """Insert ``record`` unless its principal's idempotency key is taken.

    Raises:
        StoreError: its ``run_id`` is taken by another run.
    """
    if record.idempotency_key is not None:
        found = by_idempotency_key(conn, record.principal, record.idempotency_key)
        if found is not None:
            return found, False
    if conn.execute(INSERT_RUN, record_row(record)).rowcount == 0:
        raise StoreError(f"run_id {record.run_id!r} is stored already for another run; "
                         "make run ids unique")
    return record, True


def claim(conn: sqlite3.Connection, run_id: str, owner: str, now: float) -> RunRecord | None:
    changed = conn.execute(
        "UPDATE runs SET owner = ?, epoch = epoch + 1, updated = ? "
        "WHERE run_id = ? AND status = 'running'", (owner, now, run_id)).rowcount
    return get(conn, run_id) if changed else None


def prune(conn: sqlite3.Connection, now: float, limit: int) -> int:
    """Expire up to ``limit`` finished runs past their retention, then delete up to
    :data:`PRUNE_EVENTS_PER_CALL` events of expired runs (and the blobs no event refers
    to any more). A run is ``expired`` (request and response dropped) at once; a long
    log may take a few calls to go, so a reader checks the run's status before its frames.

    Returns:
        How many runs it expired.
    """
    due = [r[0] for r in conn.execute(
        "SELECT id FROM runs WHERE retention_until <= ? "
        "AND status NOT IN ('running', 'expired') ORDER BY retention_until LIMIT ?",
        (now, limit))]
    for run in due:
        conn.execute("UPDATE runs SET status = 'expired', request = x'', response = NULL, "
                     "updated = ? WHERE id = ?", (now, run))
        conn.execute("INSERT OR IGNORE INTO purge(run) VALUES (?)", (run,))
    budget = PRUNE_EVENTS_PER_CALL
    segmented = _segmented(conn)
    for (run,) in conn.execute("SELECT run FROM purge LIMIT 100").fetchall():
        if budget <= 0:
            break
        hashes = conn.execute(
            "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE run = ? "
            "ORDER BY seq LIMIT ?) RETURNING payload_hash, output_hash",
            (run, budget)).fetchall()
        budget -= len(hashes)
        for digest in {h for pair in hashes for h in pair if h is not None}:
            conn.execute(
                "DELETE FROM blobs WHERE sha256 = ?1 AND NOT EXISTS (SELECT 1 FROM events "
                "WHERE payload_hash = ?1) AND NOT EXISTS (SELECT 1 FROM events WHERE "
                "output_hash = ?1)", (digest,))
        if budget > 0 and segmented:  # whole segments: a call may go over by one's frames
            doomed: list[tuple[int]] = []
            for segment, count in conn.execute(
                    "SELECT id, last_seq - first_seq + 1 FROM segments WHERE run = ? "
                    "ORDER BY last_seq LIMIT ?", (run, budget)).fetchall():
                if budget <= 0:
                    break
                doomed.append((segment,))
                budget -= count
            conn.executemany("DELETE FROM segments WHERE id = ?", doomed)
        if budget > 0:  # fewer than asked: none left
            conn.execute("DELETE FROM purge WHERE run = ?", (run,))
    return len(due)
