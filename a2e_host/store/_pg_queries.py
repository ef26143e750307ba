"""The PostgreSQL run store's reads, awaited jobs and ownership queries.

Layer: store backend (psycopg, async). Reads run on a pooled connection; jobs
(:func:`create_or_get`, :func:`claim`, :func:`prune`) on the writer's connection, each in
a transaction of its own; :func:`heartbeat` and :func:`claim_orphans` on the
heartbeat's. Every function takes a psycopg ``AsyncConnection``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from . import RunRecord, RunStatus, StoredFrame, StoreError

__all__ = [
    "INSERT_RUN", "record_row", "get", "by_idempotency_key", "list_runs", "frames",
    "unfinished", "create_or_get", "claim", "prune", "heartbeat", "claim_orphans",
    "ownership", "PRUNE_EVENTS_PER_CALL", "MAX_SEQ", "CLAIM_BATCH",
]

PRUNE_EVENTS_PER_CALL = 20_000
MAX_SEQ = 2**63 - 1
CLAIM_BATCH = 16
"""Runs one sweep claims at most (DURABILITY.md §3.4)."""

INSERT_RUN = (
    "INSERT INTO runs(run_id, principal, req_id, chain_id, status, request, plan_hash, "
    "last_seq, owner, epoch, cancel_requested, deadline, created, updated, response, "
    "idempotency_key, retention_until) VALUES "
    "(%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
    "ON CONFLICT DO NOTHING RETURNING id, epoch"
)

_COLUMNS = (
    "run_id, principal, req_id, chain_id, status, {request}, plan_hash, "
    "greatest(last_seq, coalesce((SELECT max(seq) FROM events e WHERE e.run = runs.id), 0)), "
    "owner, epoch, cancel_requested, deadline, created, updated, {response}, "
    "idempotency_key, retention_until, id FROM runs"
)
_RECORD = "SELECT " + _COLUMNS.format(request="request", response="response")
_LISTED = "SELECT " + _COLUMNS.format(request="''::bytea", response="NULL::bytea")

_FRAMES = (
    "SELECT e.seq, e.node_id, e.phase, coalesce(e.payload, bp.bytes), "
    "coalesce(e.output, bo.bytes) FROM events e "
    "LEFT JOIN blobs bp ON bp.sha256 = e.payload_hash "
    "LEFT JOIN blobs bo ON bo.sha256 = e.output_hash "
    "WHERE e.run = (SELECT id FROM runs WHERE run_id = %s) AND e.seq > %s "
    "ORDER BY e.seq LIMIT %s"
)

_CURSOR = re.compile(r"r([0-9]{1,19})")


def record_row(record: RunRecord) -> tuple[Any, ...]:
    """The ``runs`` columns of ``record``, in :data:`INSERT_RUN` order."""
    return (
        record.run_id, record.principal, record.req_id, record.chain_id,
        str(record.status.value), record.request, record.plan_hash, record.last_seq,
        record.owner, record.epoch, bool(record.cancel_requested), record.deadline,
        record.created, record.updated, record.response, record.idempotency_key,
        record.retention_until,
    )


TEXT_FIELDS = ("run_id", "principal", "req_id", "chain_id", "plan_hash", "owner",
               "idempotency_key")
"""The :class:`RunRecord` fields stored as PostgreSQL ``text``, which cannot hold NUL."""


def text_fields(record: RunRecord) -> dict[str, str | None]:
    """``record``'s :data:`TEXT_FIELDS` by name."""
    return {name: getattr(record, name) for name in TEXT_FIELDS}


def text_only(run_id: str, /, **values: str | None) -> None:
    """Refuse a write whose text ``values`` hold a NUL character, which PostgreSQL text
    cannot store: queued, it would fail its whole batch, i.e. the store for every run.

    Raises:
        StoreError: naming the run and the field; nothing was queued.
    """
    for name, value in values.items():
        if value is not None and "\x00" in value:
            raise StoreError(f"run {run_id!r} is not stored: its {name} contains a NUL "
                             "character, which the PostgreSQL run store cannot hold")


def _record(row: Sequence[Any]) -> RunRecord:
    return RunRecord(
        run_id=row[0], principal=row[1], req_id=row[2], chain_id=row[3],
        status=RunStatus(row[4]), request=bytes(row[5]), plan_hash=row[6],
        last_seq=int(row[7]), owner=row[8], epoch=int(row[9]),
        cancel_requested=bool(row[10]), deadline=row[11], created=row[12],
        updated=row[13], response=None if row[14] is None else bytes(row[14]),
        idempotency_key=row[15], retention_until=row[16],
    )


async def _one(conn: Any, sql: str, params: Sequence[Any]) -> RunRecord | None:
    cur = await conn.execute(sql, params)
    row = await cur.fetchone()
    return None if row is None else _record(row)


async def get(conn: Any, run_id: str) -> RunRecord | None:
    return await _one(conn, _RECORD + " WHERE run_id = %s", (run_id,))


async def by_idempotency_key(conn: Any, principal: str, key: str) -> RunRecord | None:
    return await _one(conn, _RECORD + " WHERE principal = %s AND idempotency_key = %s",
                      (principal, key))


async def list_runs(conn: Any, *, principal: str | None, statuses: Sequence[str] | None,
                    cursor: str | None, limit: int) -> tuple[list[RunRecord], str | None]:
    """Runs newest first (by ``id``), after ``cursor`` (see ``RunStore.list``).

    Raises:
        ValueError: a malformed cursor, or ``limit`` outside 1–1000.
    """
    if not 1 <= limit <= 1000:
        raise ValueError(f"limit must be between 1 and 1000, got {limit}")
    where: list[str] = []
    params: list[Any] = []
    if cursor is not None:
        match = _CURSOR.fullmatch(cursor)
        if match is None or int(match.group(1)) > MAX_SEQ:
            raise ValueError(f"cursor {cursor[:40]!r} is not one this store made; pass the "
                             "next_cursor of the previous page, or none for the first page")
        where.append("id < %s")
        params.append(int(match.group(1)))
    if principal is not None:
        where.append("principal = %s")
        params.append(principal)
    if statuses is not None:
        where.append("status = ANY(%s)")
        params.append(list(statuses))
    sql = _LISTED + (" WHERE " + " AND ".join(where) if where else "")
    cur = await conn.execute(sql + " ORDER BY id DESC LIMIT %s", (*params, limit + 1))
    rows = await cur.fetchall()
    more = len(rows) > limit
    rows = rows[:limit]
    return [_record(r) for r in rows], (f"r{rows[-1][17]}" if more else None)


async def frames(conn: Any, run_id: str, after: int, limit: int) -> list[StoredFrame]:
    cur = await conn.execute(_FRAMES, (run_id, after, limit))
    return [
        StoredFrame(int(seq), node_id, phase, bytes(frame),
                    None if output is None else bytes(output))
        for seq, node_id, phase, frame, output in await cur.fetchall()
    ]


async def unfinished(conn: Any) -> list[RunRecord]:
    cur = await conn.execute(_RECORD + " WHERE status = 'running' ORDER BY id")
    return [_record(r) for r in await cur.fetchall()]


# ── jobs: on the writer's connection, a transaction each ───────────────────


async def create_or_get(conn: Any, record: RunRecord) -> tuple[RunRecord, bool, int, int]:
    """Insert ``record`` unless its principal's idempotency key is taken.

    Returns:
        ``(record, created, id, epoch)`` (``id`` 0 when not created).

    Raises:
        StoreError: its ``run_id`` is taken by another run.
    """
    if record.idempotency_key is not None:
        found = await by_idempotency_key(conn, record.principal, record.idempotency_key)
        if found is not None:
            return found, False, 0, 0
    cur = await conn.execute(INSERT_RUN, record_row(record))
    row = await cur.fetchone()
    if row is None:
        if record.idempotency_key is not None:  # taken meanwhile by another replica
            found = await by_idempotency_key(conn, record.principal, record.idempotency_key)
            if found is not None:
                return found, False, 0, 0
        raise StoreError(f"run_id {record.run_id!r} is stored already for another run; "
                         "make run ids unique")
    return record, True, int(row[0]), int(row[1])


async def claim(conn: Any, run_id: str, owner: str, now: float
                ) -> tuple[RunRecord, int, int] | None:
    """Take an unfinished run over: owner := ``owner``, epoch + 1.

    Returns:
        ``(record, id, epoch)``, or None when the run is unknown or not running.
    """
    cur = await conn.execute(
        "UPDATE runs SET owner = %s, epoch = epoch + 1, updated = %s "
        "WHERE run_id = %s AND status = 'running' RETURNING id, epoch", (owner, now, run_id))
    row = await cur.fetchone()
    if row is None:
        return None
    record = await get(conn, run_id)
    assert record is not None
    return record, int(row[0]), int(row[1])


async def prune(conn: Any, now: float, limit: int) -> int:
    """As the SQLite store's ``prune``: expire up to ``limit`` finished runs past their
    retention, then delete a bounded number of their events and unreferenced blobs."""
    cur = await conn.execute(
        "SELECT id FROM runs WHERE retention_until <= %s "
        "AND status NOT IN ('running', 'expired') ORDER BY retention_until LIMIT %s "
        "FOR UPDATE SKIP LOCKED", (now, limit))
    due = [r[0] for r in await cur.fetchall()]
    if due:
        await conn.execute("UPDATE runs SET status = 'expired', request = ''::bytea, "
                           "response = NULL, updated = %s WHERE id = ANY(%s)", (now, due))
        await conn.execute("INSERT INTO purge(run) SELECT unnest(%s::bigint[]) "
                           "ON CONFLICT DO NOTHING", (due,))
    budget = PRUNE_EVENTS_PER_CALL
    cur = await conn.execute("SELECT run FROM purge LIMIT 100 FOR UPDATE SKIP LOCKED")
    for (run,) in await cur.fetchall():
        if budget <= 0:
            break
        cur = await conn.execute(
            "DELETE FROM events WHERE id IN (SELECT id FROM events WHERE run = %s "
            "ORDER BY seq LIMIT %s) RETURNING payload_hash, output_hash", (run, budget))
        hashes = await cur.fetchall()
        budget -= len(hashes)
        digests = sorted({bytes(h) for pair in hashes for h in pair if h is not None})
        if digests:
            await conn.execute(
                "DELETE FROM blobs b WHERE b.sha256 = ANY(%s) AND NOT EXISTS (SELECT 1 "
                "FROM events WHERE payload_hash = b.sha256) AND NOT EXISTS (SELECT 1 FROM "
                "events WHERE output_hash = b.sha256)", (digests,))
        if budget > 0:
            await conn.execute("DELETE FROM purge WHERE run = %s", (run,))
    return len(due)


# ── ownership: on the heartbeat's connection (autocommit) ─────────────────


async def heartbeat(conn: Any, replica_id: str) -> None:
    """Say this replica is alive (its ``replicas`` row's ``heartbeat_at`` := now)."""
    await conn.execute(
        "INSERT INTO replicas(replica_id, heartbeat_at, started_at) VALUES (%s, now(), now()) "
        "ON CONFLICT (replica_id) DO UPDATE SET heartbeat_at = now()", (replica_id,))


async def leave(conn: Any, replica_id: str) -> None:
    """This replica stops: its row goes, so its unfinished runs are claimable at once."""
    await conn.execute("DELETE FROM replicas WHERE replica_id = %s", (replica_id,))


async def claim_orphans(conn: Any, replica_id: str, lease: float, leftovers: Sequence[int],
                        now: float) -> list[tuple[int, int, str]]:
    """Claim up to :data:`CLAIM_BATCH` running runs whose owner has been silent past
    ``lease`` seconds (by the database's clock), or whose ``runs.id`` is in
    ``leftovers`` (this replica's id held them when this process opened the store: a
    previous process's): owner := ``replica_id``, epoch + 1. ``FOR UPDATE SKIP
    LOCKED``: replicas sweeping together claim each run once.

    Returns:
        ``(id, epoch, run_id)`` of each run claimed.
    """
    cur = await conn.execute(
        "UPDATE runs SET owner = %(me)s, epoch = epoch + 1, updated = %(now)s "
        "WHERE id IN (SELECT r.id FROM runs r "
        "LEFT JOIN replicas p ON p.replica_id = r.owner WHERE r.status = 'running' AND ("
        "(r.owner = %(me)s AND r.id = ANY(%(leftovers)s)) OR (r.owner <> %(me)s AND "
        "(p.heartbeat_at IS NULL OR p.heartbeat_at < now() - make_interval(secs => %(lease)s)"
        "))) ORDER BY r.id LIMIT %(limit)s FOR UPDATE OF r SKIP LOCKED) "
        "RETURNING id, epoch, run_id",
        {"me": replica_id, "now": now, "leftovers": list(leftovers), "lease": lease,
         "limit": CLAIM_BATCH})
    return [(int(i), int(e), str(r)) for i, e, r in await cur.fetchall()]


async def ownership(conn: Any, ids: Sequence[int]) -> list[tuple[int, int, str, bool]]:
    """``(id, epoch, status, cancel_requested)`` of the runs ``ids``."""
    cur = await conn.execute(
        "SELECT id, epoch, status, cancel_requested FROM runs WHERE id = ANY(%s)",
        (list(ids),))
    return [(int(i), int(e), str(s), bool(c)) for i, e, s, c in await cur.fetchall()]
