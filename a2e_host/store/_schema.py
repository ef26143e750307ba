"""The SQLite run store's files: schema, migrations, connections and the owner lock.

Layer: store backend (stdlib ``sqlite3``, no anyio). Everything here runs in a thread
(the writer's, or a worker thread at open), never on the event loop.

The schema follows DURABILITY.md §3.1, with differences recorded in DECISIONS.md:
``runs`` has an integer key ``id`` (stable under ``VACUUM``, the keyset of ``list``) beside
the unique ``run_id``, and ``events`` refer to a run by that ``id`` (``run``: an integer
key is a quarter cheaper to index per event than a text one); the idempotency key is
unique *per principal*. Frames are stored in ``segments`` (schema version 2): the
consecutive frames of one run committed in one batch are one row, not one row each;
``events`` keeps one row per frame for a frame or output over the size cap (those live
once in ``blobs`` by sha256, referenced from ``events``) and for a frame appended below
its run's last stored ``seq``; a ``seq`` is stored in one of the two, once;
``purge`` holds runs already expired whose events are still being deleted (bounded work
per prune).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from typing import IO

from . import StoreError, StoreVersionError

__all__ = ["SCHEMA_VERSION", "APPLICATION_ID", "connect_writer", "connect_reader", "OwnerLock"]

APPLICATION_ID = 0x41324548  # "A2EH": marks a file as an a2e-host run store
SCHEMA_VERSION = 2
"""The newest schema this code writes; a file with a higher version is refused.
Version 2 adds ``segments``; the rows of version 1's ``events`` stay where they are and
are read as before (nothing is converted)."""

JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024
"""Bytes the WAL is truncated to after a checkpoint (DURABILITY.md §3.1)."""

BUSY_TIMEOUT_MS = 5000

PAGE_SIZE = 16384
"""Bytes per page of a store file created from now on (SQLite's default is 4,096): a
segment of frames spans a quarter of the pages, and its commit a quarter of the WAL
writes. A file keeps the page size it was created with."""

_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE schema_version(version INTEGER NOT NULL)""",
        """CREATE TABLE runs(
            id INTEGER PRIMARY KEY,
            run_id TEXT NOT NULL UNIQUE,
            principal TEXT NOT NULL,
            req_id TEXT NOT NULL,
            chain_id TEXT NOT NULL,
            status TEXT NOT NULL,
            request BLOB NOT NULL,
            plan_hash TEXT NOT NULL,
            last_seq INTEGER NOT NULL,
            owner TEXT NOT NULL,
            epoch INTEGER NOT NULL,
            cancel_requested INTEGER NOT NULL,
            deadline REAL,
            created REAL NOT NULL,
            updated REAL NOT NULL,
            response BLOB,
            idempotency_key TEXT,
            retention_until REAL,
            UNIQUE(principal, idempotency_key))""",
        "CREATE INDEX runs_by_principal ON runs(principal, id)",
        "CREATE INDEX runs_by_status ON runs(status, id)",
        "CREATE INDEX runs_by_retention ON runs(retention_until) "
        "WHERE retention_until IS NOT NULL",
        """CREATE TABLE events(
            id INTEGER PRIMARY KEY,
            run INTEGER NOT NULL,
            seq INTEGER NOT NULL,
            node_id TEXT NOT NULL,
            phase TEXT NOT NULL,
            payload BLOB,
            payload_hash BLOB,
            output BLOB,
            output_hash BLOB,
            UNIQUE(run, seq))""",
        "CREATE INDEX events_payload_blob ON events(payload_hash) "
        "WHERE payload_hash IS NOT NULL",
        "CREATE INDEX events_output_blob ON events(output_hash) "
        "WHERE output_hash IS NOT NULL",
        "CREATE TABLE blobs(sha256 BLOB PRIMARY KEY, bytes BLOB NOT NULL) WITHOUT ROWID",
        "CREATE TABLE purge(run INTEGER PRIMARY KEY)",
    ),
    2: (
        # consecutive frames of one run committed together, as one row: seqs first_seq
        # through last_seq, ``frames`` a msgpack array of one [node_id, phase, frame,
        # output] per frame (see _writer and DECISIONS.md "Run store shape")
        """CREATE TABLE segments(
            id INTEGER PRIMARY KEY,
            run INTEGER NOT NULL,
            first_seq INTEGER NOT NULL,
            last_seq INTEGER NOT NULL,
            frames BLOB NOT NULL,
            UNIQUE(run, last_seq))""",
    ),
}


def _create_owner_only(path: str) -> None:
    """Create ``path`` empty with mode 0600 unless it exists (SQLite gives its ``-wal``
    and ``-shm`` files the database file's mode)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise StoreError(
            f"cannot create the run store {path!r}: {exc.strerror}; check that its folder "
            "exists and is writable, or set --store to another path"
        ) from exc
    os.close(fd)


def _schema_version(conn: sqlite3.Connection, path: str) -> int:
    """The file's schema version; 0 for a new, empty file.

    Raises:
        StoreError: the file is some other SQLite database, or not SQLite at all.
    """
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
    except sqlite3.DatabaseError as exc:
        raise StoreError(
            f"{path!r} is not a run store ({exc}); point --store at a new file or at one "
            "a2e-host created"
        ) from exc
    if app_id == 0 and tables == 0:
        return 0
    if app_id != APPLICATION_ID:
        raise StoreError(
            f"{path!r} is an SQLite file but not an a2e-host run store; point --store at a "
            "new file or at one a2e-host created"
        )
    row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def _check_version(version: int, path: str) -> None:
    if version > SCHEMA_VERSION:
        raise StoreVersionError(
            f"the run store {path!r} has schema version {version}, newer than this "
            f"a2e-host knows ({SCHEMA_VERSION}); open it with a newer a2e-host or point "
            "--store at another file"
        )


def _migrate(conn: sqlite3.Connection, path: str) -> None:
    """Bring the file's schema up to :data:`SCHEMA_VERSION`, in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = _schema_version(conn, path)
        _check_version(version, path)
        for step in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[step]:
                conn.execute(statement)
            conn.execute("DELETE FROM schema_version")
            conn.execute("INSERT INTO schema_version(version) VALUES (?)", (step,))
        if version == 0:
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def connect_writer(path: str, *, durability: str) -> sqlite3.Connection:
    """Open (creating and migrating) the store for writing: WAL, ``synchronous`` NORMAL
    or FULL, the journal size limit. The connection belongs to the calling thread.

    Raises:
        StoreVersionError: the file is newer than this code.
        StoreError: the file cannot be created or opened, or is not a run store.
    """
    _create_owner_only(path)
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the run store {path!r}: {exc}") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        _check_version(_schema_version(conn, path), path)
        conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # a new, empty file only
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(
                f"the run store {path!r} cannot use write-ahead logging (journal mode "
                f"{mode!r}); put it on a local file system"
            )
        conn.execute("PRAGMA synchronous = " + ("FULL" if durability == "full" else "NORMAL"))
        conn.execute(f"PRAGMA journal_size_limit = {JOURNAL_SIZE_LIMIT}")
        _migrate(conn, path)
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(f"cannot open the run store {path!r}: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def connect_reader(path: str, *, readonly: bool) -> sqlite3.Connection:
    """Open a reading connection (``query_only``), usable from any one thread at a time.

    Raises:
        StoreVersionError: the file is newer than this code.
        StoreError: the file is missing (``readonly``), or is not a run store.
    """
    if readonly and not os.path.exists(path):
        raise StoreError(f"no run store at {path!r}; check --store")
    try:
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA query_only = 1")
        version = _schema_version(conn, path)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the run store {path!r}: {exc}") from exc
    try:
        _check_version(version, path)
        if version == 0:
            raise StoreError(f"{path!r} is empty, not a run store yet; check --store")
    except BaseException:
        conn.close()
        raise
    return conn


class OwnerLock:
    """An exclusive ``flock`` on ``<path>.lock`` held while a host writes the store: two
    processes resuming the same runs would run their nodes twice.

    Raises:
        StoreError: another process holds it (the message names its pid).
    """

    def __init__(self, path: str) -> None:
        self.path = path + ".lock"
        self._file: IO[str] | None = None
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not a POSIX system: no lock
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        file = os.fdopen(fd, "r+", encoding="utf-8")
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = file.read().strip() or "unknown"
            file.close()
            raise StoreError(
                f"the run store {path!r} is in use by another a2e-host process (pid "
                f"{holder}); stop it, or give this host another --store"
            ) from None
        file.seek(0)
        file.truncate()
        file.write(str(os.getpid()))
        file.flush()
        self._file = file

    def release(self) -> None:
        """Let go of the lock (idempotent)."""
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError):
                file.close()
