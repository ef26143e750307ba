"""The PostgreSQL run store's writer: one task, one connection, fenced group commits.

Layer: store backend (psycopg, asyncio). The store's loop side appends *ops* (the
SQLite writer's tuples, :mod:`._writer`) to a deque; this task takes what is queued and
commits it. Ops are grouped into *segments*: a run of creates, appends and finishes is
one transaction; a cancel or an awaited job is a transaction of its own (each locks one
row and waits for nothing else, so no two replicas' transactions can deadlock).

A segment's transaction (DURABILITY.md §3.4 "Fencing"):

1. inserts the runs it creates;
2. locks every other run it writes (``SELECT … ORDER BY id FOR UPDATE``: in id order,
   so two writers never wait on each other in a cycle) and compares each run's epoch
   with the one this replica owns it at: a run whose epoch moved on was taken over by
   another replica — its frames and ending in this batch are dropped, and it is
   reported *lost* (the store stops it);
3. COPYs the frames into a temporary table and inserts them ``ON CONFLICT (run, seq) DO
   NOTHING`` (``UNIQUE(run, seq)`` is the backstop), moves ``last_seq``, writes the
   endings;
4. sends ONE ``pg_notify`` naming the runs it touched, and commits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

from ._pg_schema import CONTROL_CHANNEL, EVENTS_CHANNEL
from ._writer import APPEND, CANCEL, CREATE, FINISH, JOB

__all__ = ["Segment", "apply_segment", "apply_cancel", "prepare", "NOTIFY_MAX"]

NOTIFY_MAX = 7000
"""Payload bytes of one notification at most (PostgreSQL's limit is 8000): a batch that
touched more runs than fit notifies ``*`` (every listener re-reads)."""

TEMP_TABLE = (
    "CREATE TEMP TABLE IF NOT EXISTS a2e_events_in(run BIGINT, seq BIGINT, node_id TEXT, "
    "phase TEXT, payload BYTEA, payload_hash BYTEA, output BYTEA, output_hash BYTEA) "
    "ON COMMIT DELETE ROWS"
)
COPY_IN = ("COPY a2e_events_in(run, seq, node_id, phase, payload, payload_hash, output, "
           "output_hash) FROM STDIN")
INSERT_EVENTS = (
    "INSERT INTO events(run, seq, node_id, phase, payload, payload_hash, output, "
    "output_hash) SELECT run, seq, node_id, phase, payload, payload_hash, output, "
    "output_hash FROM a2e_events_in ON CONFLICT (run, seq) DO NOTHING"
)
LOCK_RUNS = "SELECT id, epoch FROM runs WHERE id = ANY(%s) ORDER BY id FOR UPDATE"
RUN_KEYS = "SELECT run_id, id, epoch FROM runs WHERE run_id = ANY(%s) AND owner = %s"
MOVE_LAST_SEQ = (
    "UPDATE runs r SET last_seq = greatest(r.last_seq, f.last) "
    "FROM unnest(%s::bigint[], %s::bigint[]) AS f(id, last) WHERE r.id = f.id"
)
FINISH_RUNS = (
    "UPDATE runs r SET status = f.status, response = f.response, "
    "last_seq = greatest(r.last_seq, f.last), updated = f.now, "
    "retention_until = f.now + (r.retention_until - r.created) "
    "FROM unnest(%s::bigint[], %s::text[], %s::bytea[], %s::bigint[], %s::float8[]) "
    "AS f(id, status, response, last, now) WHERE r.id = f.id AND r.status = 'running'"
)
"""Every ending of a batch in one statement (a run ends once: ids are distinct)."""
INSERT_RUNS = (
    "INSERT INTO runs(run_id, principal, req_id, chain_id, status, request, plan_hash, "
    "last_seq, owner, epoch, cancel_requested, deadline, created, updated, response, "
    "idempotency_key, retention_until) SELECT * FROM unnest(%s::text[], %s::text[], "
    "%s::text[], %s::text[], %s::text[], %s::bytea[], %s::text[], %s::bigint[], %s::text[], "
    "%s::bigint[], %s::bool[], %s::float8[], %s::float8[], %s::float8[], %s::bytea[], "
    "%s::text[], %s::float8[]) ON CONFLICT DO NOTHING RETURNING run_id, id, epoch"
)
"""Every run a batch creates in one statement (columns of :func:`~._pg_queries.record_row`)."""
CANCEL_RUN = ("UPDATE runs SET cancel_requested = true, updated = %s "
              "WHERE run_id = %s AND status = 'running' RETURNING id")
INSERT_BLOB = "INSERT INTO blobs(sha256, bytes) VALUES (%s, %s) ON CONFLICT DO NOTHING"

Owned = dict[str, tuple[int, int]]
"""``run_id`` → ``(runs.id, epoch)`` of each run this replica owns (writes fenced by)."""


async def prepare(conn: Any) -> None:
    """Set the writer's connection up: ``synchronous_commit = on`` whatever the role's or
    the database's default (a commit is acknowledged only once it is durable: the host
    sends a frame only after it committed), and its temporary table."""
    await conn.execute("SET synchronous_commit = on")
    await conn.execute(TEMP_TABLE)


class Segment:
    """What one committed segment did: the runs it lost, and its duplicates."""

    __slots__ = ("lost", "duplicates", "unknown")

    def __init__(self) -> None:
        self.lost: list[str] = []
        self.duplicates = 0
        self.unknown: list[str] = []


def _columns(rows: list[tuple[Any, ...]]) -> list[list[Any]]:
    """``rows`` as one list per column (the arrays an ``unnest`` statement takes)."""
    return [list(column) for column in zip(*rows, strict=True)]


def _blob(data: bytes, blobs: list[tuple[bytes, bytes]]) -> tuple[None, bytes]:
    digest = hashlib.sha256(data).digest()
    blobs.append((digest, data))
    return None, digest


async def apply_segment(conn: Any, ops: list[tuple[Any, ...]], owned: Owned, owner: str,
                        threshold: int) -> Segment:
    """Commit ``ops`` (creates, appends, finishes) as one fenced transaction.

    Returns:
        What it did (:class:`Segment`); ``owned`` is updated (new runs in, lost and
        finished runs out).
    """
    done = Segment()
    async with conn.transaction():
        created = [op[3] for op in ops if op[0] == CREATE]
        if created:  # one statement for every run the batch creates
            cur = await conn.execute(INSERT_RUNS, _columns(created))
            for run_id, key, epoch in await cur.fetchall():
                owned[run_id] = (int(key), int(epoch))
            done.unknown += [row[0] for row in created if row[0] not in owned]
        written = {op[3] for op in ops if op[0] in (APPEND, FINISH)}
        unseen = [run_id for run_id in written if run_id not in owned]
        if unseen:  # runs this replica owns but did not create here (e.g. a restart)
            cur = await conn.execute(RUN_KEYS, (unseen, owner))
            for run_id, key, epoch in await cur.fetchall():
                owned[run_id] = (int(key), int(epoch))
        keys = sorted({owned[r][0] for r in written if r in owned})
        lost: set[str] = set()
        if keys:
            cur = await conn.execute(LOCK_RUNS, (keys,))
            epochs = dict(await cur.fetchall())
            for run_id in written:
                held = owned.get(run_id)
                if held is not None and epochs.get(held[0]) != held[1]:
                    lost.add(run_id)
        rows: list[tuple[Any, ...]] = []
        blobs: list[tuple[bytes, bytes]] = []
        last: dict[int, int] = {}
        finishes: list[tuple[Any, ...]] = []
        ended: list[str] = []
        touched: set[str] = set()
        for op in ops:
            kind = op[0]
            if kind == CREATE:
                continue
            run_id = op[3]
            held = owned.get(run_id)
            if held is None:
                if run_id not in done.unknown:
                    done.unknown.append(run_id)
                continue
            if run_id in lost:
                continue
            touched.add(run_id)
            if kind == APPEND:
                seq = op[4]
                for node_id, phase, frame, output in op[5]:
                    frame_hash = output_hash = None
                    if len(frame) > threshold:
                        frame, frame_hash = _blob(frame, blobs)
                    if output is not None and len(output) > threshold:
                        output, output_hash = _blob(output, blobs)
                    rows.append((held[0], seq, node_id, phase, frame, frame_hash, output,
                                 output_hash))
                    seq += 1
                if seq - 1 > last.get(held[0], 0):
                    last[held[0]] = seq - 1
            elif kind == FINISH:
                _, _, _, _, status, response, last_seq, now = op
                finishes.append((held[0], status, response, last_seq, now))
                ended.append(run_id)
        if blobs:
            async with conn.cursor() as cur:
                await cur.executemany(INSERT_BLOB, blobs)
        if rows:
            async with conn.cursor() as cur:
                async with cur.copy(COPY_IN) as copy:
                    for row in rows:
                        await copy.write_row(row)
                await cur.execute(INSERT_EVENTS)
                done.duplicates = len(rows) - cur.rowcount
            await conn.execute(MOVE_LAST_SEQ, (list(last), list(last.values())))
        if finishes:
            await conn.execute(FINISH_RUNS, _columns(finishes))
        if touched:
            payload = ",".join(sorted(touched))
            await conn.execute("SELECT pg_notify(%s, %s)",
                               (EVENTS_CHANNEL, payload if len(payload) <= NOTIFY_MAX
                                else "*"))
    for run_id in lost:
        owned.pop(run_id, None)
    for run_id in ended:
        owned.pop(run_id, None)
    done.lost = sorted(lost)
    return done


async def apply_cancel(conn: Any, run_id: str, now: float) -> None:
    """``cancel_requested`` := true for a running run, and tell its owner (NOTIFY)."""
    async with conn.transaction():
        cur = await conn.execute(CANCEL_RUN, (now, run_id))
        if await cur.fetchone() is not None:
            await conn.execute("SELECT pg_notify(%s, %s)", (CONTROL_CHANNEL, run_id))
            await conn.execute("SELECT pg_notify(%s, %s)", (EVENTS_CHANNEL, run_id))


async def apply_job(conn: Any, fn: Callable[[Any], Awaitable[Any]]) -> tuple[bool, Any]:
    """Run an awaited job in a transaction of its own: ``(ok, result_or_exception)``
    (a failing job fails alone; a broken connection raises)."""
    try:
        async with conn.transaction():
            result = await fn(conn)
    except Exception as exc:
        if conn.closed or conn.broken:
            raise
        return False, exc
    return True, result


def segments(batch: list[tuple[Any, ...]]) -> list[list[tuple[Any, ...]]]:
    """``batch`` cut into segments: runs of creates/appends/finishes, and each cancel or
    job alone, in order."""
    out: list[list[tuple[Any, ...]]] = []
    run: list[tuple[Any, ...]] = []
    for op in batch:
        if op[0] in (CANCEL, JOB):
            if run:
                out.append(run)
                run = []
            out.append([op])
        else:
            run.append(op)
    if run:
        out.append(run)
    return out

