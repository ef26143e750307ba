"""The SQLite store's WAL upkeep (issue 17, "A run store": WAL, bounded disk): a new
file's pages are 16 KiB, a checkpoint runs on a thread of its own once a few MB were
committed (not inside the commit that crossed SQLite's threshold, which every frame
waiting to reach the wire would wait for), and the writer outlives a logger that fails."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
import pytest

from a2e_host.store import StoredFrame
from a2e_host.store._checkpointer import BACKSTOP_PAGES, CHECKPOINT_BYTES
from a2e_host.store._schema import PAGE_SIZE
from a2e_host.store.sqlite import open_sqlite_store
from tests.support.store import frame, record

WAIT = 20  # seconds: the bound on every wait


def _page_size(path: str) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("PRAGMA page_size").fetchone()[0])


@pytest.mark.asyncio
async def test_a_new_store_has_big_pages_and_an_old_file_keeps_its_own(tmp_path: Path) -> None:
    new, old = str(tmp_path / "new.db"), str(tmp_path / "old.db")
    with sqlite3.connect(old) as conn:  # a file made with SQLite's default page size
        conn.execute("PRAGMA page_size = 4096")
        conn.execute("VACUUM")
    for path in (new, old):
        store = await open_sqlite_store(path)
        try:
            store.create(record("r"))
            store.append("r", frame("r", 1))
            await store.flush()
            assert [f.seq for f in await store.frames("r")] == [1]
        finally:
            await store.aclose()
    assert (_page_size(new), _page_size(old)) == (PAGE_SIZE, 4096)


@pytest.mark.asyncio
async def test_checkpoints_run_off_the_writer_once_megabytes_are_committed(
        tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    size = 3000  # bytes per frame: under the blob threshold, stored in segments
    count = CHECKPOINT_BYTES // size + 200
    with anyio.fail_after(WAIT):
        store = await open_sqlite_store(path)
        try:
            writer = store._writer
            assert writer is not None and writer._checkpointer is not None
            checkpointer = writer._checkpointer
            assert writer._conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == (
                BACKSTOP_PAGES)
            store.create(record("r"))
            await store.flush()
            assert checkpointer.checkpoints == 0  # a few KB: none asked
            for seq in range(1, count + 1):
                store.append("r", frame("r", seq, size=size))
                if seq % 200 == 0:
                    await store.flush()  # many commits, as a run makes them
            await store.flush()
            ran = await anyio.to_thread.run_sync(checkpointer.ran.wait, WAIT)
            got = await store.frames("r", after=count - 2)
        finally:
            await store.aclose()
    assert ran and checkpointer.checkpoints >= 1
    assert [f.seq for f in got] == [count - 1, count]
    with sqlite3.connect(path) as conn:  # closed cleanly: everything is in the file
        assert conn.execute("SELECT max(last_seq) FROM segments").fetchone()[0] == count


class _FailingLog:
    """A logger whose stream is gone: every call raises, as structlog's does then."""

    def __getattr__(self, name: str) -> Any:
        def fail(*args: Any, **kwargs: Any) -> None:
            raise ValueError("I/O operation on closed file.")
        return fail


@pytest.mark.asyncio
async def test_the_writer_goes_on_when_its_logger_fails(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    with anyio.fail_after(WAIT):
        store = await open_sqlite_store(path)
        try:
            writer = store._writer
            assert writer is not None
            writer._log = _FailingLog()
            store.create(record("r"))
            store.append("ghost", frame("ghost", 1))  # logged: no such run
            store.append("r", frame("r", 1))
            store.append("r", StoredFrame(1, "n", "done", b"again", None))  # logged: twice
            store.append("r", frame("r", 2))
            await store.flush()
            got = await store.frames("r")
            assert store.error is None
        finally:
            await store.aclose()
    assert [f.seq for f in got] == [1, 2]
