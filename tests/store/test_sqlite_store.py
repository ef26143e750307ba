"""The SQLite run store (issue 17, "A run store"): real files in a temporary folder,
read back through the store and, where it matters, through a connection of the test's own.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from a2e_host.store import (
    RunStatus,
    RunStore,
    StoredFrame,
    StoreError,
    StoreVersionError,
    open_store,
)
from a2e_host.store.sqlite import SQLiteRunStore, open_sqlite_store
from tests.support.postgres import require_cluster
from tests.support.store import frame, frame_bytes, record, stored_events, stored_seqs

WAIT = 10  # seconds: the bound on every wait


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "runs.db")


@pytest.fixture(params=["sqlite", "postgresql"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The store contract holds for both backends: an SQLite file, a PostgreSQL database
    (of the throwaway test cluster, tests/support/postgres.py)."""
    if request.param == "sqlite":
        return str(tmp_path / "runs.db")
    return require_cluster().database("store")


@pytest.mark.asyncio
async def test_frames_come_back_after_a_seq_in_order_and_paged(location: str) -> None:
    store = await open_store(location)
    try:
        store.create(record("r1"))
        for seq in range(1, 201):
            store.append("r1", frame("r1", seq))
        await store.flush()
        assert [f.seq for f in await store.frames("r1", after=150, limit=1000)] == list(
            range(151, 201))
        page = await store.frames("r1", after=10, limit=5)
        assert [(f.seq, f.node_id, f.phase) for f in page] == [
            (s, f"n{s % 7}", "done") for s in range(11, 16)]
        assert page[0].frame == frame_bytes("r1", 11)
        assert await store.frames("r1", after=200) == []
        assert await store.frames("other", after=0) == []
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_big_frames_and_outputs_are_stored_once_by_content_hash(path: str) -> None:
    store = await open_sqlite_store(path, blob_threshold=1000)
    big_output = b'{"text":"' + b"y" * 5000 + b'"}'
    try:
        store.create(record("r1"))
        store.create(record("r2"))
        for run_id in ("r1", "r2"):
            store.append(run_id, frame(run_id, 1, size=3000, output=big_output))
            store.append(run_id, frame(run_id, 2, size=10, output=b"small"))
        await store.flush()
        one = await store.frames("r1")
        assert [(f.frame, f.output) for f in one] == [
            (frame_bytes("r1", 1, 3000), big_output), (frame_bytes("r1", 2, 10), b"small")]
    finally:
        await store.aclose()
    with sqlite3.connect(path) as conn:
        blobs = conn.execute("SELECT count(*) FROM blobs").fetchone()[0]
        rows = conn.execute("SELECT count(*) FROM events").fetchone()[0]
        segments = conn.execute("SELECT count(*) FROM segments").fetchone()[0]
    assert blobs == 3  # two distinct big frames, one shared output
    assert (rows, segments) == (2, 2)  # the small frames stay in their runs' segments


@pytest.mark.asyncio
async def test_finish_records_the_outcome_and_retention_counts_from_the_end(location: str) -> None:
    store = await open_store(location)
    try:
        store.create(record("r1", created=1000.0, retention_until=1060.0))
        store.append("r1", frame("r1", 1))
        running = await _committed_get(store, "r1")
        assert (running.status, running.last_seq, running.response) == (
            RunStatus.RUNNING, 1, None)
        store.request_cancel("r1")
        before = time.time()
        store.finish("r1", RunStatus.CANCELLED, b'{"type":"chain/resp"}', 1)
        done = await _committed_get(store, "r1")
        assert (done.status, done.last_seq, done.response, done.cancel_requested) == (
            RunStatus.CANCELLED, 1, b'{"type":"chain/resp"}', True)
        assert done.retention_until is not None
        assert before + 60 <= done.retention_until <= time.time() + 60
        store.finish("r1", RunStatus.SUCCEEDED, b"again", 5)  # a second end changes nothing
        assert (await _committed_get(store, "r1")).status is RunStatus.CANCELLED
        with pytest.raises(ValueError, match="finishes with one of"):
            store.finish("r1", RunStatus.RUNNING, b"", 1)
    finally:
        await store.aclose()


async def _committed_get(store: object, run_id: str):  # type: ignore[no-untyped-def]
    assert isinstance(store, RunStore)
    await store.flush()
    found = await store.get(run_id)
    assert found is not None
    return found


@pytest.mark.asyncio
async def test_an_idempotency_key_is_unique_per_principal(location: str) -> None:
    store = await open_store(location)
    try:
        first, created = await store.create_or_get(record("r1", idempotency_key="k"))
        assert created and first.run_id == "r1"
        again, created = await store.create_or_get(record("r2", idempotency_key="k"))
        assert (again.run_id, created) == ("r1", False)
        other, created = await store.create_or_get(record("r3", "bob", idempotency_key="k"))
        assert (other.run_id, created) == ("r3", True)
        store.create(record("r4", idempotency_key="k"))  # a plain create cannot take it
        await store.flush()
        assert await store.get("r4") is None
        found = await store.by_idempotency_key("alice", "k")
        assert found is not None and found.run_id == "r1"
        assert await store.by_idempotency_key("carol", "k") is None
        with pytest.raises(StoreError, match="run_id 'r1' is stored already"):
            await store.create_or_get(record("r1", idempotency_key="other"))
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_list_pages_every_run_once_newest_first_with_filters(location: str) -> None:
    store = await open_store(location)
    try:
        for i in range(23):
            store.create(record(f"r{i:02}", "alice" if i % 3 else "bob"))
            if i % 2:
                store.finish(f"r{i:02}", RunStatus.FAILED, b"{}", 0)
        await store.flush()
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            runs, cursor = await store.list(cursor=cursor, limit=5)
            seen += [r.run_id for r in runs]
            pages += 1
            if cursor is None:
                break
        assert seen == [f"r{i:02}" for i in reversed(range(23))]
        assert pages == 5
        alice_failed, cursor = await store.list(principal="alice", status=RunStatus.FAILED,
                                                limit=100)
        assert [r.run_id for r in alice_failed] == [
            f"r{i:02}" for i in reversed(range(23)) if i % 2 and i % 3]
        assert cursor is None
        both, _ = await store.list(status=[RunStatus.FAILED, RunStatus.RUNNING], limit=100)
        assert len(both) == 23
        exact, cursor = await store.list(limit=23)
        assert len(exact) == 23 and cursor is None  # no empty last page
        with pytest.raises(ValueError, match="cursor"):
            await store.list(cursor="bogus")
        with pytest.raises(ValueError, match="limit"):
            await store.list(limit=0)
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_prune_expires_finished_runs_past_retention_and_deletes_their_log(
        path: str) -> None:
    store = await open_sqlite_store(path, blob_threshold=100)
    now = time.time()
    shared = b"o" * 500
    try:
        store.create(record("old", created=now - 100, retention_until=now - 100 + 10))
        store.create(record("keep", created=now - 100, retention_until=now + 10_000))
        store.create(record("live", created=now - 100, retention_until=now - 90))
        for run_id in ("old", "keep", "live"):
            for seq in (1, 2):
                store.append(run_id, frame(run_id, seq, size=300, output=shared))
        store.finish("old", RunStatus.SUCCEEDED, b"resp", 2)
        store.finish("keep", RunStatus.SUCCEEDED, b"resp", 2)
        await store.flush()
        # finishing moved "old"'s window to its end: nothing is due yet
        assert await store.prune(now) == 0
        assert await store.prune(time.time() + 11) == 1
        old = await store.get("old")
        assert old is not None
        assert (old.status, old.request, old.response) == (RunStatus.EXPIRED, b"", None)
        assert await store.frames("old") == []
        assert [f.seq for f in await store.frames("keep")] == [1, 2]
        live = await store.get("live")
        assert live is not None and live.status is RunStatus.RUNNING  # never while running
        assert await store.prune(time.time() + 11) == 0  # an expired run stays expired
    finally:
        await store.aclose()
    with sqlite3.connect(path) as conn:
        digests = {r[0] for r in conn.execute("SELECT sha256 FROM blobs")}
        referenced = {r[0] for r in conn.execute(
            "SELECT payload_hash FROM events WHERE payload_hash IS NOT NULL UNION "
            "SELECT output_hash FROM events WHERE output_hash IS NOT NULL")}
    assert digests == referenced  # the shared output stays, "old"'s own frames went
    assert len(digests) == 5


@pytest.mark.asyncio
async def test_prune_deletes_a_long_log_over_several_bounded_calls(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from a2e_host.store import _queries

    monkeypatch.setattr(_queries, "PRUNE_EVENTS_PER_CALL", 40)
    store = await open_store(path)
    try:
        store.create(record("big", created=1.0, retention_until=2.0))
        for seq in range(1, 101):  # ten batches of ten frames: ten segments
            store.append("big", frame("big", seq))
            if seq % 10 == 0:
                await store.flush()
        store.finish("big", RunStatus.SUCCEEDED, b"resp", 100)
        await store.flush()
        due = time.time() + 10
        assert await store.prune(due) == 1
        assert len(stored_seqs(path, "big")) == 60
        assert await store.prune(due) == 0
        assert len(stored_seqs(path, "big")) == 20
        assert await store.prune(due) == 0
        assert stored_seqs(path, "big") == []
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_many_interleaved_runs_each_keep_their_own_gapless_log(location: str) -> None:
    store = await open_store(location)
    runs = [f"r{i}" for i in range(40)]
    try:
        for run_id in runs:
            store.create(record(run_id))

        async def produce(run_id: str, count: int) -> None:
            for seq in range(1, count + 1):
                store.append(run_id, frame(run_id, seq))
                if seq % 7 == 0:
                    await anyio.lowlevel.checkpoint()
                if store.full:
                    await store.wait_writable()

        with anyio.fail_after(WAIT * 3):
            async with anyio.create_task_group() as tg:
                for i, run_id in enumerate(runs):
                    tg.start_soon(produce, run_id, 100 + i * 10)
            await store.flush()
        for i, run_id in enumerate(runs):
            got = await store.frames(run_id, limit=1000)
            assert [f.seq for f in got] == list(range(1, 101 + i * 10))
            assert all(f.frame == frame_bytes(run_id, f.seq) for f in got)
        assert {r.run_id for r in await store.unfinished()} == set(runs)
    finally:
        await store.aclose()


@pytest.mark.asyncio
@pytest.mark.parametrize(("ceilings", "size", "bound"), [
    ({"max_pending": 64}, 100, lambda store: store.pending <= 65),
    ({"max_pending_bytes": 20_000}, 1000, lambda store: store.pending_bytes <= 21_000),
])
async def test_queued_writes_stay_under_the_ceiling_for_a_producer_that_waits(
        path: str, ceilings: dict[str, int], size: int, bound: Any) -> None:
    store = await open_sqlite_store(path, **ceilings)
    within = True
    try:
        store.create(record("r"))
        with anyio.fail_after(WAIT * 3):
            for seq in range(1, 20_001):
                store.append("r", frame("r", seq, size))
                within = within and bound(store)
                if store.full:
                    await store.wait_writable()
            await store.flush()
        assert within
        assert store.pending == 0 and store.pending_bytes == 0
        assert (await store.frames("r", after=19_990))[-1].seq == 20_000
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_a_commit_delay_holds_writes_until_a_flush_and_full_waits_for_it(
        path: str) -> None:
    store = await open_sqlite_store(path, max_pending=4, commit_delay=60.0)
    released = anyio.Event()
    try:
        store.create(record("r"))
        for seq in range(1, 5):
            store.append("r", frame("r", seq))
        assert store.full and store.committed == 0

        async def producer() -> None:
            await store.wait_writable()
            released.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(producer)
            for _ in range(20):
                await anyio.lowlevel.checkpoint()
            assert not released.is_set()
            assert stored_seqs(path, "r") == []  # nothing committed yet
            with anyio.fail_after(WAIT):
                await store.flush()  # a flush does not wait out the delay
                await released.wait()
        assert stored_seqs(path, "r") == [1, 2, 3, 4]
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_a_flush_commits_every_batch_at_once_despite_a_commit_delay(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from a2e_host.store import _writer

    monkeypatch.setattr(_writer, "MAX_BATCH", 3)  # what is queued takes several batches
    store = await open_sqlite_store(path, commit_delay=60.0)
    try:
        store.create(record("r"))
        for seq in range(1, 11):
            store.append("r", frame("r", seq))
        with anyio.fail_after(WAIT):
            await store.flush()
        assert stored_seqs(path, "r") == list(range(1, 11))
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_commit_callbacks_run_on_the_loop_with_the_highest_committed_ticket(
        location: str) -> None:
    import threading

    store = await open_store(location)
    seen: list[tuple[int, bool]] = []
    loop_thread = threading.get_ident()
    try:
        unregister = store.on_commit(
            lambda committed: seen.append((committed, threading.get_ident() == loop_thread)))
        store.create(record("r"))
        last = store.append("r", frame("r", 1))
        await store.wait_committed(last)
        assert seen and seen[-1] == (last, True)
        assert [c for c, _ in seen] == sorted(c for c, _ in seen)
        unregister()
        unregister()  # idempotent
        count = len(seen)
        await store.wait_committed(store.append("r", frame("r", 2)))
        assert len(seen) == count
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_claim_takes_an_unfinished_run_over_with_a_new_epoch(location: str) -> None:
    store = await open_store(location, owner="old-host")
    store.create(record("r1"))
    store.create(record("r2"))
    store.finish("r2", RunStatus.FAILED, b"{}", 0)
    await store.aclose()
    store = await open_store(location, owner="new-host")
    try:
        assert [r.owner for r in await store.unfinished()] == ["old-host"]
        claimed = await store.claim("r1")
        assert claimed is not None and (claimed.owner, claimed.epoch) == ("new-host", 1)
        assert await store.claim("r2") is None
        assert await store.claim("nope") is None
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_the_store_files_are_owner_only(path: str) -> None:
    store = await open_store(path)
    try:
        store.create(record("r"))
        await store.flush()
        names = [path, path + "-wal", path + "-shm", path + ".lock"]
        modes = {Path(n).name: stat.S_IMODE(os.stat(n).st_mode) for n in names}
        assert modes == {Path(n).name: 0o600 for n in names}
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_a_second_host_cannot_write_the_same_store(path: str) -> None:
    store = await open_store(path)
    try:
        with pytest.raises(StoreError, match=f"in use by another a2e-host process \\(pid "
                                             f"{os.getpid()}\\)"):
            await open_store(path)
        reader = await open_store(path, readonly=True)  # an operator's CLI may read
        try:
            store.create(record("r"))
            await store.flush()
            found = await reader.get("r")
            assert found is not None and found.principal == "alice"
            with pytest.raises(StoreError, match="read-only"):
                reader.append("r", frame("r", 1))
        finally:
            await reader.aclose()
    finally:
        await store.aclose()
    reopened = await open_store(path)  # the lock goes with the store
    await reopened.aclose()


@pytest.mark.asyncio
async def test_a_store_from_a_newer_version_is_refused_with_a_clear_error(path: str) -> None:
    store = await open_store(path)
    await store.aclose()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(StoreVersionError, match="schema version 99, newer than this "
                                                "a2e-host knows \\(2\\)"):
        await open_store(path)
    with pytest.raises(StoreVersionError):
        await open_store(path, readonly=True)


@pytest.mark.asyncio
async def test_a_file_that_is_not_a_run_store_is_refused(path: str, tmp_path: Path) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE mine(x)")
    with pytest.raises(StoreError, match="an SQLite file but not an a2e-host run store"):
        await open_store(path)
    text = tmp_path / "notes.txt"
    text.write_bytes(b"hello, this is not a database at all" * 200)
    with pytest.raises(StoreError, match="is not a run store"):
        await open_store(str(text))
    with pytest.raises(StoreError, match="no run store at"):
        await open_store(str(tmp_path / "absent.db"), readonly=True)


@pytest.mark.asyncio
async def test_a_failed_commit_breaks_the_store_and_every_later_write_says_why(
        path: str) -> None:
    store = await open_sqlite_store(path)
    broke: list[BaseException | None] = []
    store.on_commit(lambda _: broke.append(store.error))
    store.create(record("r"))
    await store.flush()
    writer = store._writer
    assert writer is not None
    # the writer is idle after the flush: cap the file so the next batch cannot commit
    writer._conn.execute("PRAGMA max_page_count = 8")
    ticket = store.append("r", StoredFrame(1, "n", "done", b"z" * 400_000, None))
    try:
        with anyio.fail_after(WAIT), pytest.raises(StoreError, match="failed"):
            await store.wait_committed(ticket)
        assert isinstance(store.error, sqlite3.Error)
        assert broke[-1] is store.error
        with pytest.raises(StoreError, match="nothing more is stored"):
            store.append("r", frame("r", 3))
        with pytest.raises(StoreError):
            await store.flush()
        with pytest.raises(StoreError):
            await store.prune(time.time())
        assert stored_seqs(path, "r") == []  # the failed batch left nothing half-written
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_a_closed_store_refuses_writes_and_reads(path: str) -> None:
    store = await open_store(path)
    store.create(record("r"))
    store.append("r", frame("r", 1))
    await store.aclose()  # commits what was queued
    await store.aclose()
    assert stored_seqs(path, "r") == [1]
    with pytest.raises(StoreError, match="closed"):
        store.append("r", frame("r", 2))
    with pytest.raises(StoreError, match="closed"):
        await store.get("r")


@pytest.mark.asyncio
async def test_a_seq_stored_twice_keeps_the_first_and_a_frame_of_no_run_is_not_stored(
        path: str) -> None:
    store = await open_store(path)
    try:
        made, _ = await store.create_or_get(record("r"))  # not created by a queued write
        store.append(made.run_id, frame("r", 1))
        store.append("r", StoredFrame(1, "other", "error", b"second", None))
        store.append("r", frame("r", 2))
        store.append("ghost", frame("ghost", 1))  # no such run: dropped, logged
        await store.flush()
        got = await store.frames("r")
        assert [(f.seq, f.frame) for f in got] == [
            (1, frame_bytes("r", 1)), (2, frame_bytes("r", 2))]
        assert await store.frames("ghost") == []
        assert store.error is None  # neither broke the store
    finally:
        await store.aclose()
    assert [seq for seq, _, _ in stored_events(path)] == [1, 2]


@pytest.mark.asyncio
@pytest.mark.parametrize(("durability", "synchronous"), [("normal", 1), ("full", 2)])
async def test_the_store_writes_ahead_with_the_durability_asked_for(
        path: str, durability: str, synchronous: int) -> None:
    store = await open_sqlite_store(path, durability=durability)  # type: ignore[arg-type]
    try:
        writer = store._writer
        assert writer is not None
        pragmas = [writer._conn.execute(f"PRAGMA {name}").fetchone()[0]
                   for name in ("journal_mode", "synchronous", "journal_size_limit")]
        assert pragmas == ["wal", synchronous, 64 * 1024 * 1024]
    finally:
        await store.aclose()
    with pytest.raises(ValueError, match="durability must be 'normal' or 'full'"):
        await open_sqlite_store(path, durability="sometimes")  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_a_cancelled_callers_job_never_answers_a_later_caller(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # the writer holds its batch (commit_delay) while alice's create_or_get is cancelled;
    # her job still commits, and its result must not resolve bob's, whose waiting future
    # may sit at the freed one's address: every object "at one address" here, so a job
    # told apart by its future's id() would answer bob with alice's record
    import a2e_host.store.sqlite as sqlite_module
    monkeypatch.setattr(sqlite_module, "id", lambda obj: 1, raising=False)
    store = await open_sqlite_store(path, commit_delay=60.0)
    try:
        for n in range(20):
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(store.create_or_get,
                                  record(f"a{n}", "alice", idempotency_key=f"ka{n}"))
                    for _ in range(5):
                        await anyio.lowlevel.checkpoint()
                    scope.cancel()
            got: list[Any] = []
            async with anyio.create_task_group() as tg:
                tg.start_soon(_create_into, store,
                              record(f"b{n}", "bob", idempotency_key=f"kb{n}"), got)
                for _ in range(5):
                    await anyio.lowlevel.checkpoint()
                await store.flush()
            (bob, created), = got
            assert (bob.run_id, bob.principal, created) == (f"b{n}", "bob", True)
    finally:
        await store.aclose()


async def _create_into(store: SQLiteRunStore, rec: Any, got: list[Any]) -> None:
    got.append(await store.create_or_get(rec))
