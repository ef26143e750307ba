"""The SQLite writer's event rows: many plain rows per statement, mixed with rows that
keep an output or a blob, interleaved runs, and frames appended twice (issue 17, "A run
store": one row per frame keyed by ``(run_id, seq)``, none twice)."""

from __future__ import annotations

from pathlib import Path

import pytest

from a2e_host.store._writer import SEGMENT_FRAMES
from a2e_host.store.sqlite import open_sqlite_store
from tests.support.store import frame, frame_bytes, record, stored_seqs

FRAMES = 2 * SEGMENT_FRAMES + 11  # whole segments and a remainder, in one batch


def _output(seq: int) -> bytes | None:
    return b'{"out":%d}' % seq if seq % 5 == 0 else None


@pytest.mark.asyncio
async def test_interleaved_runs_mixing_plain_and_output_rows_come_back_whole(
        tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    store = await open_sqlite_store(path, blob_threshold=300)
    try:
        for run_id in ("r1", "r2"):
            store.create(record(run_id))
        for seq in range(1, FRAMES + 1):  # one loop tick: one batch for the writer
            store.append("r1", frame("r1", seq, output=_output(seq)))
            store.append("r2", frame("r2", seq, size=400 if seq % 9 == 0 else 0))
        await store.flush()
        one = await store.frames("r1", after=0, limit=10_000)
        two = await store.frames("r2", after=0, limit=10_000)
    finally:
        await store.aclose()
    assert [(f.seq, f.node_id, f.phase, f.frame, f.output) for f in one] == [
        (s, f"n{s % 7}", "done", frame_bytes("r1", s), _output(s))
        for s in range(1, FRAMES + 1)]
    assert [(f.seq, f.frame, f.output) for f in two] == [
        (s, frame_bytes("r2", s, 400 if s % 9 == 0 else 0), None)
        for s in range(1, FRAMES + 1)]


@pytest.mark.asyncio
async def test_frames_appended_again_are_stored_once_with_their_first_bytes(
        tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    store = await open_sqlite_store(path)
    try:
        store.create(record("r1"))
        for seq in range(1, FRAMES + 1):
            store.append("r1", frame("r1", seq))
        await store.flush()
        for seq in range(2, FRAMES + 6):  # most stored already, five new
            store.append("r1", frame("r1", seq, size=120))
        await store.flush()
        stored = await store.frames("r1", after=0, limit=10_000)
    finally:
        await store.aclose()
    assert stored_seqs(path, "r1") == list(range(1, FRAMES + 6))
    assert [f.frame for f in stored] == (
        [frame_bytes("r1", s) for s in range(1, FRAMES + 1)]
        + [frame_bytes("r1", s, 120) for s in range(FRAMES + 1, FRAMES + 6)])


@pytest.mark.asyncio
async def test_small_batches_committed_one_at_a_time_store_each_frame_once(
        tmp_path: Path) -> None:
    # a chain whose nodes wait for their start to be committed: a frame or two per
    # batch, each committed as one statement once the run is known; a frame appended
    # again, a frame keeping an output and a frame of no run still take the full path
    path = str(tmp_path / "runs.db")
    store = await open_sqlite_store(path)
    try:
        store.create(record("r1"))
        await store.flush()
        for seq in range(1, 6):
            store.append("r1", frame("r1", seq))
            if seq % 2:
                store.append("r1", frame("r1", seq + 100))
            await store.flush()
        store.append("r1", frame("r1", 3, size=120))  # stored already: the first stays
        await store.flush()
        store.append("r1", frame("r1", 6, output=b'{"x":6}'))
        store.append("ghost", frame("ghost", 1))  # no such run: dropped, logged
        await store.flush()
        stored = await store.frames("r1", after=0, limit=10_000)
        assert store.error is None
    finally:
        await store.aclose()
    seqs = [1, 2, 3, 4, 5, 6, 101, 103, 105]
    assert stored_seqs(path, "r1") == seqs
    assert [(f.seq, f.frame, f.output) for f in stored] == [
        (s, frame_bytes("r1", s), b'{"x":6}' if s == 6 else None) for s in seqs]
    assert stored_seqs(path, "ghost") == []
