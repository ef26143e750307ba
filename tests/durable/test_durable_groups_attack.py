"""Attacks on durable frame groups (one store write per loop tick): a durable run's
frames are given to the store by a deferred flush (``RunStore.defer``), so whatever
makes the deferred flush never run strands the frames: never stored, never sent, and
the sink never told the store failed. The SQLite store runs deferred flushes from a loop
callback; these tests hold the PostgreSQL store to the same (parity): a frame emitted
once the store broke or closed fails the sink (one error to the attached client,
``committed()`` raises) instead of waiting forever."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from a2e_host.chains.messages import ChainEvent, chain_codec
from a2e_host.runtime.durable import DurableSink
from a2e_host.store import RunStore, StoreError, open_store
from a2e_host.store.sqlite import open_sqlite_store
from tests.support.postgres import cut_connections, require_cluster
from tests.support.store import RecordingOutbox, record

WAIT = 10  # seconds: the bound on every wait


def _event(seq: int) -> ChainEvent:
    return ChainEvent(req_id="q1", seq=seq, node_id=f"n{seq}", phase="start")


async def _open(backend: str, tmp_path: Any) -> tuple[RunStore, str]:
    if backend == "sqlite":
        return await open_sqlite_store(str(tmp_path / "runs.db")), ""
    url = require_cluster().database("groups_attack")
    return await open_store(url, owner="A", lease=1.5), url


async def _one_frame_committed(store: RunStore, failures: list[BaseException]
                               ) -> tuple[DurableSink, RecordingOutbox]:
    """Run ``run1`` with an attached sink whose first frame is committed."""
    store.create(record("run1"))
    sink = DurableSink(store, "run1", req_id="q1", on_store_error=failures.append)
    outbox = RecordingOutbox()
    sink.attach(outbox)
    sink.send_nowait(_event(1))
    with anyio.fail_after(WAIT):
        await sink.committed()
    return sink, outbox


def _errors(outbox: RecordingOutbox) -> list[Any]:
    decoded = [chain_codec.decode(frame) for frame in outbox.frames]
    return [m for m in decoded if not isinstance(m, ChainEvent)]


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_frame_emitted_after_the_store_closed_fails_the_sink_not_hangs(
        backend: str, tmp_path: Any) -> None:
    store, _ = await _open(backend, tmp_path)
    failures: list[BaseException] = []
    try:
        sink, outbox = await _one_frame_committed(store, failures)
        assert sink.committed_position == 1
    finally:
        await store.aclose()
    sink.send_nowait(_event(2))  # the store closed: this frame is never stored
    with anyio.fail_after(WAIT):  # PostgreSQL: the deferred flush never ran (a hang)
        with pytest.raises(StoreError):
            await sink.committed()
    assert len(failures) == 1
    assert [type(m).__name__ for m in _errors(outbox)] == ["ErrorMessage"]
    assert sink.committed_position == 1 and len(outbox.frames) == 2


@pytest.mark.asyncio
async def test_a_postgres_sink_emitting_after_its_store_broke_is_told_at_once(
        tmp_path: Any) -> None:
    store, url = await _open("postgres", tmp_path)
    failures: list[BaseException] = []
    try:
        # all committed: the sink awaits no commit report
        sink, outbox = await _one_frame_committed(store, failures)
        assert await anyio.to_thread.run_sync(cut_connections, url) >= 1
        store.create(record("other"))  # the writer finds the database gone: it breaks
        with anyio.fail_after(WAIT), pytest.raises(StoreError, match="failed"):
            await store.flush()
        assert store.error is not None
        assert failures == []  # the sink had nothing in flight
        sink.send_nowait(_event(2))  # SQLite: refused at the end of this tick
        with anyio.fail_after(WAIT):  # PostgreSQL: waits until the store is closed
            with pytest.raises(StoreError):
                await sink.committed()
        assert len(failures) == 1
        errors = _errors(outbox)
        assert len(errors) == 1 and errors[0].message.startswith(
            "the run store failed ("), errors
        assert len(outbox.frames) == 2  # frame 1, then the one error; frame 2 never sent
    finally:
        await store.aclose()


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_an_empty_append_many_stores_nothing_and_breaks_nothing(
        backend: str, tmp_path: Any) -> None:
    """``append_many`` with no items (the protocol does not forbid it) is a write of
    nothing. SQLite wrote a segment row spanning ``first_seq .. first_seq - 1``: its
    ``last_seq`` is the run's last stored ``seq``, which UNIQUE(run, last_seq) already
    holds, so the batch failed and the store broke for every run (PostgreSQL writes no
    row)."""
    from tests.support.store import frame

    store, _ = await _open(backend, tmp_path)
    try:
        store.create(record("run1"))
        for seq in (1, 2, 3):
            store.append("run1", frame("run1", seq))
        with anyio.fail_after(WAIT):
            await store.flush()
            store.append_many("run1", 4, [])  # alone in its batch: the writer's fast path
            await store.flush()
            assert store.error is None
            store.create(record("run2"))
            store.append_many("run2", 1, [])  # with a create: the general path
            store.append("run1", frame("run1", 4))
            await store.flush()
            assert store.error is None
            stored = [f.seq for f in await store.frames("run1")]
            assert await store.frames("run2") == []
    finally:
        await store.aclose()
    assert stored == [1, 2, 3, 4]
