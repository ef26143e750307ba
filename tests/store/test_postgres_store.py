"""What the PostgreSQL run store adds to the store contract (issue 18; the contract
itself runs on both backends in test_sqlite_store.py): one NOTIFY per committed batch,
epoch fencing, heartbeats and takeover, cancels and wake-ups across replicas, versioned
migrations. Each test has a database of its own in the throwaway cluster.
"""

from __future__ import annotations

from typing import Any

import anyio
import psycopg
import pytest

from a2e_host.store import RunStatus, StoreError, StoreVersionError, open_store
from a2e_host.store.postgres import PostgresRunStore
from a2e_host.store.shared import SharedRunStore
from tests.support.postgres import require_cluster
from tests.support.store import frame, frame_bytes, record

WAIT = 10  # seconds: the bound on every wait
LEASE = 1.5  # short, yet past the stalls of a loaded 2-core machine


@pytest.fixture
def url() -> str:
    return require_cluster().database("pgstore")


async def _open(url: str, owner: str, **options: Any) -> PostgresRunStore:
    store = await open_store(url, owner=owner, lease=options.pop("lease", LEASE), **options)
    assert isinstance(store, PostgresRunStore) and isinstance(store, SharedRunStore)
    return store


@pytest.mark.asyncio
async def test_a_batch_of_many_events_sends_one_notification_naming_its_runs(url: str) -> None:
    store = await _open(url, "A")
    batches: list[int] = []
    try:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as listener:
            await listener.execute("LISTEN a2e_events")
            store.on_commit(batches.append)
            for run in ("r1", "r2", "r3"):
                store.create(record(run))
            for seq in range(1, 301):  # 900 events queued in one loop tick
                for run in ("r1", "r2", "r3"):
                    store.append(run, frame(run, seq))
            await store.flush()
            committed = len(batches)
            notes = []
            with anyio.move_on_after(1.0):  # every notification is delivered by then
                async for note in listener.notifies():
                    notes.append(note.payload)
    finally:
        await store.aclose()
    assert committed <= 3, "the writer commits what is queued as one batch"
    assert len(notes) == committed, "one notification per committed batch, not per event"
    assert set(",".join(notes).split(",")) == {"r1", "r2", "r3"}


@pytest.mark.asyncio
async def test_writes_of_a_run_another_replica_took_over_never_land(url: str) -> None:
    a = await _open(url, "A")
    b = await _open(url, "B")
    lost: list[str] = []
    try:
        a.on_lost(lost.append)
        a.create(record("r"))
        for seq in (1, 2):
            a.append("r", frame("r", seq))
        await a.flush()
        claimed = await b.claim("r")
        assert claimed is not None and (claimed.owner, claimed.epoch, claimed.last_seq) == (
            "B", 1, 2)
        a.append("r", frame("r", 3, size=50))
        a.finish("r", RunStatus.SUCCEEDED, b"from A", 3)
        await a.flush()
        assert lost == ["r"]
        assert [f.seq for f in await b.frames("r")] == [1, 2]
        b.append("r", frame("r", 3))
        b.finish("r", RunStatus.FAILED, b"from B", 3)
        await b.flush()
        a.append("r", frame("r", 4))  # later writes of A are refused as well
        await a.flush()
        got = await b.get("r")
        assert got is not None and (got.status, got.response) == (RunStatus.FAILED, b"from B")
        assert [(f.seq, f.frame) for f in await b.frames("r")] == [
            (s, frame_bytes("r", s)) for s in (1, 2, 3)]
        assert a.error is None, "a lost run does not break the store"
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.asyncio
async def test_a_silent_replicas_runs_are_claimed_within_the_lease_a_live_ones_never(
        url: str) -> None:
    a = await _open(url, "A")
    b = await _open(url, "B")
    c = await _open(url, "C")
    claimed_by_b: list[Any] = []
    claimed_by_c: list[Any] = []
    try:
        a.create(record("of-a"))
        b.create(record("of-b"))
        await a.flush()
        await b.flush()
        got = anyio.Event()
        b.on_claimed(lambda r: (claimed_by_b.append(r), got.set()))
        c.on_claimed(lambda r: (claimed_by_c.append(r), got.set()))
        await anyio.sleep(LEASE * 2)  # every replica beats: nothing is claimed
        assert claimed_by_b == claimed_by_c == []
        for task in a._tasks:  # A goes silent (its heartbeat stops), as if paused
            task.cancel()
        with anyio.fail_after(WAIT):
            await got.wait()
        await anyio.sleep(LEASE)  # the other sweeper had its chance too
        claims = claimed_by_b + claimed_by_c
        assert [(r.run_id, r.epoch) for r in claims] == [("of-a", 1)], "claimed once"
        assert claims[0].owner in ("B", "C")
    finally:
        for store in (a, b, c):
            await store.aclose()


@pytest.mark.asyncio
async def test_a_replica_that_stops_leaves_its_runs_to_be_claimed_at_once(url: str) -> None:
    a = await _open(url, "A", lease=10.0)
    b = await _open(url, "B", lease=10.0)
    try:
        a.create(record("r"))
        await a.aclose()
        got = anyio.Event()
        claims: list[Any] = []
        b.on_claimed(lambda r: (claims.append(r), got.set()))
        with anyio.fail_after(10.0 - 1):  # B's next heartbeat, inside the lease
            await got.wait()
        assert [(r.run_id, r.owner) for r in claims] == [("r", "B")]
    finally:
        await b.aclose()


@pytest.mark.asyncio
async def test_a_cancel_asked_on_one_replica_reaches_the_owner_and_wakes_watchers(
        url: str) -> None:
    a = await _open(url, "A")
    b = await _open(url, "B")
    cancelled = anyio.Event()
    seen: list[str] = []
    try:
        a.on_cancel(lambda run_id: (seen.append(run_id), cancelled.set()))
        a.create(record("r"))
        await a.flush()
        with b.watch("r") as watch:
            a.append("r", frame("r", 1))
            with anyio.fail_after(WAIT):
                assert await watch.wait(WAIT)
            assert not await watch.wait(0.2), "no change since"
            b.request_cancel("r")
            await b.flush()
            with anyio.fail_after(WAIT):
                await cancelled.wait()
        assert seen[0] == "r"
        got = await b.get("r")
        assert got is not None and got.cancel_requested
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.asyncio
async def test_a_cancel_that_came_before_the_run_was_live_on_its_new_owner_is_told_again(
        url: str) -> None:
    """A replica taking a run over owns it (claimed) a moment before the run is live
    there; a cancel notified in that moment finds nothing to stop, so the owner is told
    again at its next heartbeats while the run still runs."""
    a = await _open(url, "A")
    b = await _open(url, "B")
    told: list[str] = []
    again = anyio.Event()

    def cancel(run_id: str) -> None:  # the first time, the run is not live here yet
        told.append(run_id)
        if len(told) == 2:
            again.set()

    try:
        a.on_cancel(cancel)
        a.create(record("r"))
        await a.flush()
        b.request_cancel("r")
        await b.flush()
        with anyio.fail_after(WAIT):
            await again.wait()
        assert told[:2] == ["r", "r"]
        a.finish("r", RunStatus.CANCELLED, b"cancelled", 0)
        await a.flush()
        await anyio.sleep(LEASE / 2)  # past a heartbeat or two: an ended run is not told
        count = len(told)
        await anyio.sleep(LEASE / 2)
        assert len(told) == count
    finally:
        await a.aclose()
        await b.aclose()


@pytest.mark.asyncio
async def test_migrations_are_versioned_and_a_newer_or_foreign_schema_is_refused(
        url: str) -> None:
    store = await _open(url, "A")
    await store.aclose()
    store = await _open(url, "A")  # migrated already: opens as it is
    await store.aclose()
    reader = await open_store(url, readonly=True)
    try:
        with pytest.raises(StoreError, match="read-only"):
            reader.create(record("r"))
    finally:
        await reader.aclose()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute("UPDATE schema_version SET version = 99")
    with pytest.raises(StoreVersionError, match="schema version 99"):
        await _open(url, "A")
    other = require_cluster().database("foreign")
    async with await psycopg.AsyncConnection.connect(other, autocommit=True) as conn:
        await conn.execute("CREATE TABLE runs(x int)")
    with pytest.raises(StoreError, match="not an a2e-host run store"):
        await _open(other, "A")
    with pytest.raises(StoreError, match="cannot open the run store"):
        await _open("postgresql://a2e@127.0.0.1:1/none", "A")


@pytest.mark.asyncio
async def test_replicas_starting_together_on_an_empty_database_migrate_it_once(
        url: str) -> None:
    opened: list[PostgresRunStore] = []

    async def start(owner: str) -> None:
        opened.append(await _open(url, owner))

    try:
        with anyio.fail_after(WAIT * 3):
            async with anyio.create_task_group() as tg:
                for owner in ("A", "B", "C", "D"):
                    tg.start_soon(start, owner)
        assert sorted(s.owner for s in opened) == ["A", "B", "C", "D"]
        async with await psycopg.AsyncConnection.connect(url) as conn:
            cur = await conn.execute("SELECT version FROM schema_version")
            assert await cur.fetchall() == [(1,)]
    finally:
        for store in opened:
            await store.aclose()


@pytest.mark.asyncio
async def test_a_restarted_replica_claims_its_previous_process_runs_whatever_the_clocks(
        url: str) -> None:
    """The process before wrote under a clock an hour ahead (another machine, same
    ``--replica-id``): its running run is still this id's leftover, claimed at once; a
    run this process creates is never claimed by it."""
    import time

    before = await _open(url, "A")
    ahead = time.time() + 3600
    before.create(record("left", created=ahead, updated=ahead))
    await before.flush()
    await before.aclose()
    claimed = anyio.Event()
    got: list[Any] = []
    now = await _open(url, "A")
    try:
        now.create(record("new"))
        await now.flush()
        now.on_claimed(lambda r: (got.append(r), claimed.set()))
        with anyio.fail_after(WAIT):
            await claimed.wait()
        await anyio.sleep(LEASE / 2)  # more beats: nothing more is claimed
        assert [(r.run_id, r.owner, r.epoch) for r in got] == [("left", "A", 1)]
    finally:
        await now.aclose()


@pytest.mark.asyncio
async def test_run_ids_keys_and_principals_are_data_never_sql(url: str) -> None:
    hostile = "x'); DROP TABLE runs; --"
    store = await _open(url, "A")
    try:
        made, created = await store.create_or_get(
            record(hostile, principal=hostile, idempotency_key=hostile))
        assert created and made.run_id == hostile
        store.append(hostile, frame(hostile, 1))
        store.request_cancel(hostile)
        await store.flush()
        got = await store.by_idempotency_key(hostile, hostile)
        assert got is not None and (got.run_id, got.principal, got.cancel_requested) == (
            hostile, hostile, True)
        assert [f.seq for f in await store.frames(hostile)] == [1]
        assert await store.get("' OR '1'='1") is None
        page, _ = await store.list(principal="' OR '1'='1")
        assert page == []
        with pytest.raises(ValueError, match="cursor"):
            await store.list(cursor="r1; DROP TABLE runs")
        page, _ = await store.list(principal=hostile)
        assert [r.run_id for r in page] == [hostile]
    finally:
        await store.aclose()
