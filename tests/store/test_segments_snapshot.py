"""A page of a run's frames is read from one snapshot of the file: its ``events`` rows
and its ``segments`` are two queries, and a batch committed between them (a big frame's
row, then a segment after it) must not show the segment without the row: the page would
skip that ``seq`` for good (PROTOCOL.md §5: gapless ``seq``)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from a2e_host.store import _queries as q
from a2e_host.store._schema import connect_reader
from a2e_host.store.sqlite import open_sqlite_store
from tests.support.store import frame, record


class _CommitsBetween:
    """A reading connection that lets ``commit()`` run right after the events query."""

    def __init__(self, conn: sqlite3.Connection, commit: Any) -> None:
        self._conn = conn
        self._commit = commit

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        cursor = self._conn.execute(sql, params)
        if sql == q._ROWS:
            rows = cursor.fetchall()
            self._commit()
            return iter(rows)  # type: ignore[return-value]
        return cursor


@pytest.mark.asyncio
async def test_a_batch_committed_between_the_two_queries_leaves_no_gap_in_a_page(
        tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    store = await open_sqlite_store(path)
    try:
        store.create(record("r"))
        for seq in range(1, 10):
            store.append("r", frame("r", seq))
        await store.flush()
    finally:
        await store.aclose()
    big = frame("r", 10, size=5000)

    def commit() -> None:  # what the writer does for frames 10 (a row) and 11-12
        with sqlite3.connect(path) as writer:
            writer.execute("INSERT INTO events(run, seq, node_id, phase, payload) "
                           "VALUES (1, 10, ?, ?, ?)", (big.node_id, big.phase, big.frame))
            writer.execute("INSERT INTO segments(run, first_seq, last_seq, frames) "
                           "VALUES (1, 11, 12, ?)", (msgspec.msgpack.encode(
                               [[f.node_id, f.phase, f.frame, f.output]
                                for f in (frame("r", 11), frame("r", 12))]),))

    reader = connect_reader(path, readonly=True)
    try:
        page = q.frames(_CommitsBetween(reader, commit),  # type: ignore[arg-type]
                        "r", 9, 10)
        later = q.frames(reader, "r", 9, 10)
    finally:
        reader.close()
    assert [f.seq for f in page] in ([], [10, 11, 12])  # one snapshot: before or after
    assert [f.seq for f in later] == [10, 11, 12]
