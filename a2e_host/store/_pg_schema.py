"""The PostgreSQL run store's schema and its versioned migrations (DURABILITY.md §3.1, §3.4).

Layer: store backend (psycopg, async). The tables are the SQLite store's (``runs``,
``events``, ``blobs``, ``purge``, ``schema_version``) with PostgreSQL types, plus
``replicas`` (one row per serving replica: its heartbeat). Migrations run at open, in
one transaction under an advisory lock, so replicas starting together migrate once.
"""

from __future__ import annotations

from typing import Any

from . import StoreError, StoreVersionError

__all__ = ["SCHEMA_VERSION", "migrate", "EVENTS_CHANNEL", "CONTROL_CHANNEL"]

SCHEMA_VERSION = 1
"""The newest schema this code writes; a database with a higher version is refused."""

EVENTS_CHANNEL = "a2e_events"
"""NOTIFY channel: one notification per committed batch, its payload the run ids whose
frames or ending it committed (comma-separated), or ``*`` when they do not fit."""
CONTROL_CHANNEL = "a2e_ctl"
"""NOTIFY channel: a run id whose cancel was asked (its owner stops it)."""

_LOCK_KEY = 0x41324548  # "A2EH": the advisory lock migrations hold

_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        "CREATE TABLE IF NOT EXISTS schema_version(version INTEGER NOT NULL)",
        """CREATE TABLE runs(
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            run_id TEXT NOT NULL UNIQUE,
            principal TEXT NOT NULL,
            req_id TEXT NOT NULL,
            chain_id TEXT NOT NULL,
            status TEXT NOT NULL,
            request BYTEA NOT NULL,
            plan_hash TEXT NOT NULL,
            last_seq BIGINT NOT NULL,
            owner TEXT NOT NULL,
            epoch BIGINT NOT NULL,
            cancel_requested BOOLEAN NOT NULL,
            deadline DOUBLE PRECISION,
            created DOUBLE PRECISION NOT NULL,
            updated DOUBLE PRECISION NOT NULL,
            response BYTEA,
            idempotency_key TEXT,
            retention_until DOUBLE PRECISION,
            UNIQUE(principal, idempotency_key))""",
        "CREATE INDEX runs_by_principal ON runs(principal, id)",
        "CREATE INDEX runs_by_status ON runs(status, id)",
        "CREATE INDEX runs_by_retention ON runs(retention_until) "
        "WHERE retention_until IS NOT NULL",
        "CREATE INDEX runs_running_by_owner ON runs(owner) WHERE status = 'running'",
        """CREATE TABLE events(
            id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            run BIGINT NOT NULL,
            seq BIGINT NOT NULL,
            node_id TEXT NOT NULL,
            phase TEXT NOT NULL,
            payload BYTEA,
            payload_hash BYTEA,
            output BYTEA,
            output_hash BYTEA,
            UNIQUE(run, seq))""",
        "CREATE INDEX events_payload_blob ON events(payload_hash) "
        "WHERE payload_hash IS NOT NULL",
        "CREATE INDEX events_output_blob ON events(output_hash) "
        "WHERE output_hash IS NOT NULL",
        "CREATE TABLE blobs(sha256 BYTEA PRIMARY KEY, bytes BYTEA NOT NULL)",
        "CREATE TABLE purge(run BIGINT PRIMARY KEY)",
        "CREATE TABLE replicas(replica_id TEXT PRIMARY KEY, "
        "heartbeat_at TIMESTAMPTZ NOT NULL, started_at TIMESTAMPTZ NOT NULL)",
    ),
}


async def migrate(conn: Any, where: str) -> None:
    """Bring the database's schema up to :data:`SCHEMA_VERSION` (one transaction, under
    an advisory lock). ``conn`` is a psycopg ``AsyncConnection`` in autocommit mode.

    Raises:
        StoreVersionError: the database was migrated by a newer a2e-host.
        StoreError: it holds tables that are not a run store's.
    """
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        version = await _version(conn, where)
        if version > SCHEMA_VERSION:
            raise StoreVersionError(
                f"the run store {where} has schema version {version}, newer than this "
                f"a2e-host knows ({SCHEMA_VERSION}); run a newer a2e-host against it or "
                "point --store at another database")
        for step in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[step]:
                await conn.execute(statement)
            await conn.execute("DELETE FROM schema_version")
            await conn.execute("INSERT INTO schema_version(version) VALUES (%s)", (step,))


async def _version(conn: Any, where: str) -> int:
    cur = await conn.execute("SELECT to_regclass('schema_version') IS NOT NULL, "
                             "to_regclass('runs') IS NOT NULL")
    has_version, has_runs = await cur.fetchone()
    if not has_version:
        if has_runs:
            raise StoreError(f"{where} has a 'runs' table that is not an a2e-host run "
                             "store's; point --store at another database")
        return 0
    cur = await conn.execute("SELECT max(version) FROM schema_version")
    row = await cur.fetchone()
    return int(row[0] or 0)


async def read_version(conn: Any, where: str) -> int:
    """The database's schema version (0: not a run store yet), for read-only opens."""
    return await _version(conn, where)
