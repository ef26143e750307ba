"""The SQLite store's segments (schema version 2): the frames of one run committed in
one batch are one row; pages cut inside a segment, a file written by schema version 1
(one ``events`` row per frame) read back exactly after the upgrade, and the duplicate
backstop across both tables (issue 17, "A run store")."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path

import pytest

from a2e_host.store import RunStatus, StoredFrame, open_store
from a2e_host.store._schema import _MIGRATIONS, APPLICATION_ID
from a2e_host.store._writer import SEGMENT_FRAMES
from a2e_host.store.sqlite import open_sqlite_store
from tests.support.store import frame, frame_bytes, record, stored_events, stored_seqs


@pytest.mark.asyncio
async def test_pages_cut_inside_a_segment_return_every_frame_once_in_order(
        tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    store = await open_sqlite_store(path)
    try:
        store.create(record("r"))
        for seq in range(1, 11):  # one batch: one segment of ten frames
            store.append("r", frame("r", seq, output=b'{"o":%d}' % seq if seq % 3 else None))
        await store.flush()
        pages: list[list[int]] = []
        after = 0
        while page := await store.frames("r", after=after, limit=3):
            pages.append([f.seq for f in page])
            after = page[-1].seq
        middle = await store.frames("r", after=4, limit=2)
        record_read = await store.get("r")
    finally:
        await store.aclose()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT run, first_seq, last_seq FROM segments").fetchall() == [
            (1, 1, 10)]
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 0
    assert pages == [[1, 2, 3], [4, 5, 6], [7, 8, 9], [10]]
    assert middle == [frame("r", 5, output=b'{"o":5}'), frame("r", 6)]
    assert record_read is not None and record_read.last_seq == 10


@pytest.mark.asyncio
@pytest.mark.parametrize("created_before", [False, True])
async def test_a_batch_longer_than_a_segment_is_split_and_read_back_whole(
        tmp_path: Path, created_before: bool) -> None:
    # created in the same batch: the writer's general path; before it: a batch of only
    # the run's next frames, gathered without a step per frame
    path = str(tmp_path / "runs.db")
    count = 2 * SEGMENT_FRAMES + 5
    store = await open_sqlite_store(path)
    try:
        store.create(record("r"))
        if created_before:
            await store.flush()
        # one write, so the batch cannot be cut by when the writer thread runs
        store.append_many("r", 1, [(f.node_id, f.phase, f.frame, f.output)
                                   for f in (frame("r", seq) for seq in range(1, count + 1))])
        await store.flush()
        got = await store.frames("r", after=SEGMENT_FRAMES - 2, limit=5)
        everything = await store.frames("r", limit=count + 10)
    finally:
        await store.aclose()
    with sqlite3.connect(path) as conn:
        spans = conn.execute("SELECT first_seq, last_seq FROM segments ORDER BY first_seq"
                             ).fetchall()
    assert spans == [(1, SEGMENT_FRAMES), (SEGMENT_FRAMES + 1, 2 * SEGMENT_FRAMES),
                     (2 * SEGMENT_FRAMES + 1, count)]
    assert [f.seq for f in got] == list(range(SEGMENT_FRAMES - 1, SEGMENT_FRAMES + 4))
    assert everything == [frame("r", seq) for seq in range(1, count + 1)]


def _version_1_file(path: str) -> list[StoredFrame]:
    """A store file as schema version 1 wrote it (one ``events`` row per frame, a big
    frame in ``blobs``); returns the frames of its run ``old``."""
    big = frame_bytes("old", 3, 5000)
    digest = hashlib.sha256(big).digest()
    frames = [StoredFrame(1, "a", "start", frame_bytes("old", 1)),
              StoredFrame(2, "a", "done", frame_bytes("old", 2), b'{"v":1}'),
              StoredFrame(3, "b", "done", big, None)]
    with sqlite3.connect(path, isolation_level=None) as conn:
        for statement in _MIGRATIONS[1]:
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version(version) VALUES (1)")
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(
            "INSERT INTO runs(id, run_id, principal, req_id, chain_id, status, request, "
            "plan_hash, last_seq, owner, epoch, cancel_requested, created, updated) VALUES "
            "(1, 'old', 'alice', 'req-old', '', 'running', x'', '', 0, 'o', 0, 0, 1, 1)")
        conn.execute("INSERT INTO blobs(sha256, bytes) VALUES (?, ?)", (digest, big))
        for f in frames[:2]:
            conn.execute("INSERT INTO events(run, seq, node_id, phase, payload, output) "
                         "VALUES (1, ?, ?, ?, ?, ?)", (f.seq, f.node_id, f.phase, f.frame,
                                                       f.output))
        conn.execute("INSERT INTO events(run, seq, node_id, phase, payload_hash) "
                     "VALUES (1, 3, 'b', 'done', ?)", (digest,))
    return frames


@pytest.mark.asyncio
async def test_a_version_1_file_reads_back_exactly_before_and_after_the_upgrade(
        tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    old = _version_1_file(path)
    reader = await open_store(path, readonly=True)  # no migration: still version 1
    try:
        assert await reader.frames("old") == old
        found = await reader.get("old")
        assert found is not None and found.last_seq == 3
    finally:
        await reader.aclose()
    store = await open_store(path)  # migrates to version 2
    try:
        assert await store.frames("old") == old
        assert await store.frames("old", after=1, limit=1) == old[1:2]
        assert await store.claim("old") is not None  # a resumed run goes on appending
        for seq in range(2, 7):  # 2 and 3 are stored already: kept as they were
            store.append("old", frame("old", seq, size=50))
        await store.flush()
        got = await store.frames("old")
        found = await store.get("old")
        store.finish("old", RunStatus.SUCCEEDED, b"resp", 6)
        await store.flush()
        assert await store.prune(time.time() + 10**9) == 0  # no retention: kept
    finally:
        await store.aclose()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == 2
    assert got == old + [frame("old", seq, size=50) for seq in (4, 5, 6)]
    assert found is not None and found.last_seq == 6
    assert stored_seqs(path, "old") == [1, 2, 3, 4, 5, 6]


@pytest.mark.asyncio
async def test_prune_deletes_a_runs_segments_and_rows_and_its_blobs(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    store = await open_sqlite_store(path, blob_threshold=100)
    try:
        store.create(record("gone", created=1.0, retention_until=2.0))
        store.create(record("kept"))
        for seq in range(1, 8):  # small frames in segments, every third over the threshold
            store.append("gone", frame("gone", seq, size=300 if seq % 3 == 0 else 0))
            store.append("kept", frame("kept", seq))
        store.finish("gone", RunStatus.SUCCEEDED, b"resp", 7)
        await store.flush()
        assert await store.prune(time.time() + 10) == 1
        assert await store.frames("gone") == []
        assert [f.seq for f in await store.frames("kept")] == list(range(1, 8))
    finally:
        await store.aclose()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM blobs").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM purge").fetchone()[0] == 0
    assert stored_seqs(path, "gone") == []
    assert [e[0] for e in stored_events(path, "kept")] == list(range(1, 8))


@pytest.mark.asyncio
async def test_a_frame_appended_again_in_its_own_batch_is_not_stored_twice(
        tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    store = await open_sqlite_store(path)
    try:
        store.create(record("r"))
        # appended again within one batch, with other bytes: the first stays
        for seq, size in ((1, 0), (2, 0), (3, 0), (2, 60), (3, 60), (4, 0), (1, 60), (5, 0)):
            store.append("r", frame("r", seq, size=size))
        await store.flush()
        got = await store.frames("r")
        assert store.error is None
    finally:
        await store.aclose()
    assert stored_seqs(path, "r") == [1, 2, 3, 4, 5]
    assert [(f.seq, f.frame) for f in got] == [(s, frame_bytes("r", s)) for s in range(1, 6)]


@pytest.mark.asyncio
async def test_runs_the_writer_forgot_keep_their_last_seq_from_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from a2e_host.store import _writer

    monkeypatch.setattr(_writer, "MAX_KEYS", 2)  # forgotten before almost every batch
    path = str(tmp_path / "runs.db")
    runs = ["r1", "r2", "r3"]
    store = await open_sqlite_store(path)
    try:
        for run_id in runs:
            store.create(record(run_id))
        for first in (1, 3, 4):  # each batch repeats the last frame of the one before
            for seq in range(first, first + 3):
                for run_id in runs:
                    store.append(run_id, frame(run_id, seq, size=0 if seq < 5 else 70))
            await store.flush()
        got = {run_id: await store.frames(run_id) for run_id in runs}
    finally:
        await store.aclose()
    for run_id in runs:
        assert stored_seqs(path, run_id) == [1, 2, 3, 4, 5, 6]
        assert got[run_id] == [frame(run_id, seq) for seq in (1, 2, 3, 4)] + [
            frame(run_id, seq, size=70) for seq in (5, 6)]
