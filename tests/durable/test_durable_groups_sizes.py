"""Regression: a durable run's frames emitted in one loop tick, at and around the group
and segment limits (GROUP_FRAMES 512, SEGMENT_FRAMES 1024), two runs interleaved frame
by frame in the same ticks, with frames and outputs over the 4 KiB blob threshold
inside the groups, are stored once each under their own ``seq`` and reach the outbox in
order, only once committed — on both stores (PostgreSQL parity)."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from a2e_host.chains.messages import ChainEvent, ChainResponse, chain_codec
from a2e_host.runtime.durable import GROUP_FRAMES, DurableSink
from a2e_host.store import RunStatus, RunStore, StoreError, open_store
from a2e_host.store.sqlite import open_sqlite_store
from tests.support.postgres import require_cluster
from tests.support.store import RecordingOutbox, record

WAIT = 30  # seconds: the bound on every wait
BIG = 5000  # bytes: over the 4 KiB blob threshold


async def _open(backend: str, tmp_path: Any) -> RunStore:
    if backend == "sqlite":
        return await open_sqlite_store(str(tmp_path / "runs.db"))
    return await open_store(require_cluster().database("groups_sizes"), owner="A",
                            lease=5.0)


def _event(run: str, seq: int) -> ChainEvent:
    text = "y" * BIG if seq % 97 == 0 else ""  # a frame for blobs now and then
    return ChainEvent(req_id=run, seq=seq, node_id=f"{run}-n{seq}", phase="done",
                      output=f"{run}:{seq}{text}")


def _output(seq: int) -> bytes | None:
    if seq % 101 == 0:
        return b"o" * BIG  # an output for blobs
    return b'{"k":%d}' % seq if seq % 3 == 0 else None


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize("burst", [GROUP_FRAMES, GROUP_FRAMES + 1, 2 * GROUP_FRAMES,
                                   2 * GROUP_FRAMES + 1])
async def test_interleaved_bursts_around_the_limits_are_stored_once_in_order(
        backend: str, burst: int, tmp_path: Any) -> None:
    runs = ["ra", "rb"]
    store = await _open(backend, tmp_path)
    try:
        sinks: dict[str, DurableSink] = {}
        outboxes: dict[str, RecordingOutbox] = {}
        committed_seqs: dict[str, set[int]] = {run: set() for run in runs}
        for run in runs:
            store.create(record(run))
            sinks[run] = DurableSink(store, run, req_id=run)

            def check(frame: bytes, run: str = run) -> None:
                # a frame reaches the wire only once its seq is committed
                message = chain_codec.decode(frame)
                if isinstance(message, ChainEvent):
                    assert message.seq <= sinks[run].committed_position, message.seq

            outboxes[run] = RecordingOutbox(check=check)
            sinks[run].attach(outboxes[run])
        with anyio.fail_after(WAIT):
            for tick in range(2):  # two ticks of `burst` frames each, per run
                for i in range(1, burst + 1):  # one tick: no await in between
                    seq = tick * burst + i
                    for run in runs:
                        sinks[run].send_nowait(_event(run, seq), output=_output(seq))
                assert all(sinks[run].uncommitted == burst for run in runs)
                for run in runs:
                    await sinks[run].committed()
                    committed_seqs[run].add(sinks[run].committed_position)
            for run in runs:
                sinks[run].send_nowait(ChainResponse(req_id=run, success=True),
                                       status=RunStatus.SUCCEEDED)
            for run in runs:
                await sinks[run].committed()
            total = 2 * burst
            stored = {run: await store.frames(run, limit=total + 10) for run in runs}
            records = {run: await store.get(run) for run in runs}
    finally:
        await store.aclose()
    for run in runs:
        frames = stored[run]
        assert [f.seq for f in frames] == list(range(1, total + 1))
        decoded = [chain_codec.decode(f.frame) for f in frames]
        assert [(m.req_id, m.seq) for m in decoded] == [(run, s) for s in range(1, total + 1)]
        assert [f.node_id for f in frames] == [f"{run}-n{s}" for s in range(1, total + 1)]
        assert [f.output for f in frames] == [_output(s) for s in range(1, total + 1)]
        assert [m.output for m in decoded] == [
            _event(run, s).output for s in range(1, total + 1)]
        sent = [chain_codec.decode(frame) for frame in outboxes[run].frames]
        assert [m.seq for m in sent[:-1]] == list(range(1, total + 1))
        assert isinstance(sent[-1], ChainResponse) and sent[-1].req_id == run
        assert committed_seqs[run] == {burst, total}
        record_ = records[run]
        assert record_ is not None and record_.status == RunStatus.SUCCEEDED
        assert record_.last_seq == total


@pytest.mark.asyncio
async def test_a_store_failing_under_groups_of_two_runs_tells_each_client_once(
        tmp_path: Any) -> None:
    """A batch holding a flushed-at-once group of one run (512 frames) and a deferred
    group of another fails: each attached client gets its committed frames, then exactly
    one error, nothing unstored; both producers are told once."""
    store = await open_sqlite_store(str(tmp_path / "runs.db"))
    failures: dict[str, list[BaseException]] = {"ra": [], "rb": []}
    sinks: dict[str, DurableSink] = {}
    outboxes: dict[str, RecordingOutbox] = {}
    try:
        for run in ("ra", "rb"):
            store.create(record(run))
            sinks[run] = DurableSink(store, run, req_id=run,
                                     on_store_error=failures[run].append)
            outboxes[run] = RecordingOutbox()
            sinks[run].attach(outboxes[run])
            sinks[run].send_nowait(_event(run, 1))
        with anyio.fail_after(WAIT):
            await store.flush()
            for run in ("ra", "rb"):
                await sinks[run].committed()
            writer = store._writer  # type: ignore[attr-defined]
            pages = writer._conn.execute("PRAGMA page_count").fetchone()[0]
            writer._conn.execute(f"PRAGMA max_page_count = {pages}")  # idle: no growth
            for seq in range(2, GROUP_FRAMES + 12):  # one tick: ra's first group goes now
                sinks["ra"].send_nowait(_event("ra", seq), output=b"p" * 300)
            sinks["rb"].send_nowait(_event("rb", 2), output=b"o" * BIG)
            for run in ("ra", "rb"):
                with pytest.raises(StoreError):
                    await sinks[run].committed()
        for run in ("ra", "rb"):
            sent = [chain_codec.decode(frame) for frame in outboxes[run].frames]
            assert [type(m).__name__ for m in sent] == ["ChainEvent", "ErrorMessage"]
            assert sent[0].seq == 1 and sent[1].code == "runtime_error"
            assert len(failures[run]) == 1 and failures[run][0] is store.error
            assert sinks[run].committed_position == 1
    finally:
        await store.aclose()


@pytest.mark.asyncio
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_store_full_of_groups_holds_the_producer_until_they_commit(
        backend: str, tmp_path: Any) -> None:
    """Backpressure with groups: the bytes of a tick's group count toward the store's
    ``full`` once flushed, a producer waits on it, and a commit clears it (the attribute
    is kept at commits, not left stale)."""
    options = {"max_pending_bytes": 20_000, "commit_delay": 60.0}
    if backend == "sqlite":
        store: RunStore = await open_sqlite_store(str(tmp_path / "runs.db"), **options)
    else:
        store = await open_store(require_cluster().database("groups_full"), owner="A",
                                 lease=5.0, **options)
    try:
        store.create(record("r"))
        sink = DurableSink(store, "r", req_id="r")
        outbox = RecordingOutbox()
        sink.attach(outbox)
        with anyio.fail_after(WAIT):
            await store.flush()
            for seq in range(1, 31):  # ~30 KB in one tick: over the store's ceiling
                sink.send_nowait(ChainEvent(req_id="r", seq=seq, output="p" * 1000))
            assert not store.full  # not given to the store yet: the tick's flush does
            for _ in range(100):  # the tick ends: the group is written (bounded)
                if store.full:
                    break
                await anyio.lowlevel.checkpoint()
            assert store.full and outbox.frames == []
            writable_returned = anyio.Event()

            async def producer() -> None:
                await sink.wait_writable()
                writable_returned.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(producer)
                for _ in range(10):
                    await anyio.lowlevel.checkpoint()
                assert not writable_returned.is_set()  # held while the store is full
                await store.flush()  # hurries past the commit delay
                await writable_returned.wait()
            assert not store.full and store.pending == 0
            assert len(outbox.frames) == 30
    finally:
        await store.aclose()
