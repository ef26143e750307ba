"""Frames written as groups (``RunStore.append_many``) and writes deferred to the end
of a loop tick (``RunStore.defer``): what a durable run's sink does, one write per tick
(issue 17: "writes are batched by one writer and never awaited per event"). The store
contract, on both backends: each frame of a group is stored as ``append`` stores it
(in ``seq`` order, a big frame or output once by content hash, a ``seq`` stored twice
kept as first stored)."""

from __future__ import annotations

from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from a2e_host.store import FrameItem, StoredFrame, open_store
from tests.support.postgres import require_cluster
from tests.support.store import frame, record

WAIT = 10  # seconds: the bound on every wait
THRESHOLD = 1000  # bytes: frames and outputs over it go to blobs


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return str(tmp_path / "runs.db")
    return require_cluster().database("groups")


def _items(frames: list[StoredFrame]) -> list[FrameItem]:
    return [(f.node_id, f.phase, f.frame, f.output) for f in frames]


@pytest.mark.asyncio
async def test_groups_of_interleaved_runs_store_each_frame_as_append_would(
        location: str) -> None:
    r1 = [frame("r1", seq) for seq in range(1, 7)]
    r1[3] = frame("r1", 4, size=3000, output=b'{"o":"' + b"x" * 2000 + b'"}')  # blobs
    r2 = [frame("r2", seq, output=b'{"o":%d}' % seq) for seq in range(1, 6)]
    deferred: list[str] = []
    with anyio.fail_after(WAIT):
        store = await open_store(location, blob_threshold=THRESHOLD)
        try:
            store.create(record("r1"))
            store.create(record("r2"))
            first = store.append_many("r1", 1, _items(r1[:3]))
            store.append_many("r2", 1, _items(r2[:2]))
            store.append_many("r1", 4, _items(r1[3:]))

            def flush() -> None:  # a producer's tick-end write
                deferred.append("r2")
                store.append_many("r2", 3, _items(r2[2:]))

            store.defer(flush)
            await store.flush()  # runs what was deferred first
            again = store.append_many("r1", 2, _items(r1[1:3]))  # stored already
            await store.wait_committed(again)
            got1 = await store.frames("r1", limit=100)
            got2 = await store.frames("r2", limit=100)
        finally:
            await store.aclose()
    assert first >= 1 and deferred == ["r2"]
    assert got1 == r1
    assert got2 == r2


@pytest.mark.asyncio
async def test_a_deferred_write_is_made_by_the_end_of_the_tick_without_a_flush(
        tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    with anyio.fail_after(WAIT):
        store = await open_store(path)
        try:
            store.create(record("r"))
            tickets: list[int] = []
            store.defer(lambda: tickets.append(store.append_many(
                "r", 1, _items([frame("r", 1), frame("r", 2)]))))
            assert tickets == []  # not before the loop runs again
            while not tickets:
                await anyio.lowlevel.checkpoint()
            await store.wait_committed(tickets[0])
            got = await store.frames("r")
        finally:
            await store.aclose()
    assert [f.seq for f in got] == [1, 2]


@pytest.mark.asyncio
async def test_many_segments_of_one_batch_go_in_multi_row_inserts_and_read_back_whole(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # two rows per INSERT, so a batch of a few segments takes several statements (in
    # one transaction): the fast path (one run) and the general path (two runs)
    from a2e_host.store import _segment_rows, _writer

    monkeypatch.setattr(_segment_rows, "ROWS_PER_STATEMENT", 2)
    monkeypatch.setattr(_writer, "ROWS_PER_STATEMENT", 2)
    count = 5 * _segment_rows.SEGMENT_FRAMES + 3
    frames = {run: [frame(run, seq) for seq in range(1, count + 1)] for run in ("a", "b")}
    with anyio.fail_after(WAIT):
        store = await open_store(str(tmp_path / "runs.db"))
        try:
            store.create(record("a"))
            store.create(record("b"))
            await store.flush()
            store.append_many("a", 1, _items(frames["a"]))  # alone in its batch
            await store.flush()
            store.append_many("b", 1, _items(frames["b"][:count // 2]))
            store.append_many("a", count + 1, _items([frame("a", count + 1)]))
            store.append_many("b", count // 2 + 1, _items(frames["b"][count // 2:]))
            await store.flush()
            got = {run: await store.frames(run, limit=count + 10) for run in ("a", "b")}
        finally:
            await store.aclose()
    assert got["a"] == [*frames["a"], frame("a", count + 1)]
    assert got["b"] == frames["b"]
