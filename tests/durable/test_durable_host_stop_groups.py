"""Regression: the host stopping while a durable run's frames wait in a group (emitted
in the tick the registry closes, not yet given to the store): they are stored — the
store's close runs the deferred flush — and the run sees ``host_stopping`` (an
attribute set as the registry closes) in its cancellation, so what it would emit then
is neither stored nor sent. A run that ended before the close never sees it set."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
import structlog

from a2e_host.chains.messages import ChainEvent, chain_codec
from a2e_host.runtime.durable import DurableSink
from a2e_host.runtime.runs import Run, RunRegistry
from a2e_host.store.sqlite import open_sqlite_store
from tests.support.store import RecordingOutbox, record

WAIT = 10


def _event(seq: int) -> ChainEvent:
    return ChainEvent(req_id="q1", seq=seq, node_id=f"n{seq}", phase="start")


@pytest.mark.asyncio
async def test_frames_grouped_when_the_host_stops_are_stored_and_later_ones_are_not(
        tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    store = await open_sqlite_store(path)
    registry = RunRegistry(structlog.get_logger())
    outbox = RecordingOutbox()
    emitted = anyio.Event()
    seen: dict[str, bool] = {}

    async def body(run: Run) -> None:
        sink = run.sink
        sink.send_nowait(_event(1))
        sink.send_nowait(_event(2))
        emitted.set()
        try:
            await anyio.sleep_forever()
        finally:
            seen["stopping"] = run.host_stopping
            if not run.host_stopping:  # what the chains plugin's emit does
                sink.send_nowait(_event(99))

    async def quick(run: Run) -> None:
        seen["quick_before"] = run.host_stopping

    try:
        store.create(record("run1"))
        with anyio.fail_after(WAIT):
            async with registry.open():
                sink = DurableSink(store, "run1", req_id="q1")
                run = registry.start(body, req_id="q1", sink=sink, outbox=outbox)
                done_early = registry.start(quick, req_id="q2")
                await emitted.wait()
                await done_early.done.wait()
                await sink.committed()
                for seq in (3, 4, 5):  # the tick the host begins stopping in
                    sink.send_nowait(_event(seq))
                assert sink.uncommitted == 3
            assert run.done.is_set()
            assert done_early.host_stopping is False
    finally:
        with anyio.fail_after(WAIT):
            await store.aclose()
    assert seen == {"stopping": True, "quick_before": False}
    again = await open_sqlite_store(path, readonly=True)
    try:
        stored = await again.frames("run1")
    finally:
        await again.aclose()
    assert [f.seq for f in stored] == [1, 2, 3, 4, 5]
    assert [chain_codec.decode(f.frame).seq for f in stored] == [1, 2, 3, 4, 5]
    sent = [chain_codec.decode(frame).seq for frame in outbox.frames]
    assert sent[:2] == [1, 2] and 99 not in sent
