"""The PostgreSQL run store stays up whatever a run's strings hold, registers its
replica before any run of it exists, commits synchronously whatever the database's
default, bounds its connections, and never strands a run it took over (issue 18
review). Each test has a schema of its own in the throwaway cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import msgspec
import psycopg
import pytest
import structlog
import structlog.testing

from a2e_host.exceptions import RemoteProtocolError
from a2e_host.runtime.durable import DurableSink
from a2e_host.store import RunRecord, RunStatus, StoreError, open_store
from a2e_host.store._pg_owner import hold_replica_id
from a2e_host.store._pg_schema import migrate
from a2e_host.store.postgres import PostgresRunStore
from tests.support.postgres import require_cluster
from tests.support.store import RecordingOutbox, frame, record

WAIT = 10  # seconds: the bound on every wait
LEASE = 1.5


@pytest.fixture
def url() -> str:
    return require_cluster().database("pgsafe")


async def _open(url: str, owner: str, **options: Any) -> PostgresRunStore:
    store = await open_store(url, owner=owner, lease=options.pop("lease", LEASE), **options)
    assert isinstance(store, PostgresRunStore)
    return store


@pytest.mark.asyncio
async def test_a_nul_in_a_runs_strings_fails_that_write_only_and_the_store_stays_up(
        url: str) -> None:
    store = await _open(url, "A")
    try:
        for field in ("req_id", "chain_id", "idempotency_key", "principal", "run_id"):
            bad = msgspec.structs.replace(record(f"bad-{field}"), **{field: "x\x00y"})
            with pytest.raises(StoreError, match=f"its {field} contains a NUL character"):
                store.create(bad)
            with pytest.raises(StoreError, match=f"its {field} contains a NUL character"):
                await store.create_or_get(bad)
        store.create(record("good"))
        with pytest.raises(StoreError, match="its node_id contains a NUL character"):
            store.append("good", msgspec.structs.replace(frame("good", 1), node_id="n\x00"))
        store.append("good", frame("good", 1))
        with anyio.fail_after(WAIT):
            await store.flush()
        assert store.error is None and store.unready() is None
        assert [f.seq for f in await store.frames("good")] == [1]
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_a_replica_is_alive_in_the_replicas_table_before_its_store_is_returned(
        url: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await migrate(conn, "test")
        await hold_replica_id(conn, "A", "test")  # what opening the store does first
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as other:
            cur = await other.execute(
                "SELECT heartbeat_at > now() - interval '1 minute' FROM replicas "
                "WHERE replica_id = 'A'")
            assert await cur.fetchall() == [(True,)], (
                "a run created before the first heartbeat must not look like a silent "
                "replica's")


@pytest.mark.asyncio
async def test_the_writer_commits_synchronously_even_where_the_default_is_off(
        url: str) -> None:
    off = url + "%20-csynchronous_commit%3Doff"  # the connection's default: off
    async with await psycopg.AsyncConnection.connect(off, autocommit=True) as conn:
        cur = await conn.execute("SHOW synchronous_commit")
        assert await cur.fetchone() == ("off",)
    store = await _open(off, "A")
    try:
        async def show(conn: Any) -> tuple[str, dict[str, str]]:
            cur = await conn.execute("SHOW synchronous_commit")
            row = await cur.fetchone()
            return row[0], conn.info.get_parameters()

        setting, parameters = await store._job(show)
    finally:
        await store.aclose()
    assert setting == "on"
    assert parameters["connect_timeout"] == "10" and parameters["keepalives"] == "1"


@pytest.mark.asyncio
async def test_a_run_taken_over_is_handed_again_when_handing_it_failed(url: str) -> None:
    a = await _open(url, "A")
    a.create(record("r"))
    await a.flush()
    await a.aclose()  # A leaves: its running run is claimable at once
    b = await _open(url, "B")
    handed: list[RunRecord] = []
    got = anyio.Event()

    def resume(run: RunRecord) -> None:
        handed.append(run)
        if len(handed) == 1:
            raise RuntimeError("the first hand-over fails")
        got.set()

    try:
        b.on_claimed(resume)
        with anyio.fail_after(WAIT):
            await got.wait()
    finally:
        await b.aclose()
    assert [run.run_id for run in handed] == ["r", "r"]
    assert handed[-1].owner == "B"


@pytest.mark.asyncio
async def test_a_tail_of_an_ended_run_whose_frames_are_missing_says_gap_not_spins(
        url: str) -> None:
    from a2e_chains.replicas import tail

    store = await _open(url, "A")
    try:
        store.create(record("r"))
        for seq in (1, 2):
            store.append("r", frame("r", seq))
        store.finish("r", RunStatus.SUCCEEDED, b"resp", 5)  # frames 3..5 never stored
        await store.flush()
        outbox = RecordingOutbox()
        with anyio.fail_after(WAIT):
            with pytest.raises(StoreError, match="has a gap: it ended at seq 5, but seq 3 "
                                                 "is missing"):
                await tail(store, "r", outbox, [2])
        assert outbox.frames == []
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_a_sink_told_twice_its_run_was_taken_over_sends_one_error_and_says_takeover(
        tmp_path: Path) -> None:
    store = await open_store(str(tmp_path / "runs.db"))
    store.create(record("run1"))
    outbox = RecordingOutbox()
    sink = DurableSink(store, "run1", req_id="q1")
    sink.attach(outbox)
    try:
        with structlog.testing.capture_logs() as logs:
            sink.lost(RemoteProtocolError("run1 was taken over by another replica"))
            sink.lost(RemoteProtocolError("run1 was taken over by another replica"))
    finally:
        await store.aclose()
    assert len(outbox.frames) == 1, "one error for the connection, not one per report"
    events = [line["event"] for line in logs]
    assert any("taken over by another replica" in e for e in events), events
    assert not any("the run store failed" in e for e in events), events


@pytest.mark.asyncio
async def test_a_heartbeat_stuck_in_the_database_is_given_up_and_tried_on_a_new_connection(
        url: str) -> None:
    store = await _open(url, "A")
    stuck: set[int] = set()
    try:
        async with await psycopg.AsyncConnection.connect(url) as locker, \
                await psycopg.AsyncConnection.connect(url, autocommit=True) as watcher:
            # A's replicas row locked: every beat's upsert waits on it
            await locker.execute("SELECT 1 FROM replicas WHERE replica_id = 'A' FOR UPDATE")
            with anyio.fail_after(WAIT):
                while len(stuck) < 2:
                    cur = await watcher.execute(
                        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                        "AND query LIKE '%%INSERT INTO replicas%%'")
                    stuck |= {int(row[0]) for row in await cur.fetchall()}
                    await anyio.sleep(0.05)
            await locker.rollback()
        assert store.error is None
    finally:
        await store.aclose()
    assert len(stuck) >= 2, "a beat held by the database ends, and the next one is sent"


@pytest.mark.asyncio
async def test_closing_a_store_whose_writer_is_held_by_the_database_ends_in_bounded_time(
        url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("a2e_host.store.postgres.CLOSE_TIMEOUT", 0.5)
    store = await _open(url, "A")
    store.create(record("r"))
    await store.flush()
    async with await psycopg.AsyncConnection.connect(url) as locker:
        # the run's row locked: the writer's next batch waits on it
        await locker.execute("SELECT 1 FROM runs WHERE run_id = 'r' FOR UPDATE")
        store.append("r", frame("r", 1))
        with anyio.fail_after(WAIT):
            await store.aclose()
        await locker.rollback()
    assert store.committed < 2, "the held batch was not committed"
