"""The durable sink (issue 17: "a frame reaches the wire only after its batch is
committed"; "attach with since_seq: no gap, no duplicate"): a real SQLite store, and
outboxes that record what reaches them."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import structlog

from a2e_host.chains.messages import ChainEvent, ChainResponse, chain_codec
from a2e_host.codec import encode_message
from a2e_host.runtime.durable import DurableSink
from a2e_host.runtime.replay import replay_stored
from a2e_host.runtime.runs import Run, RunRegistry
from a2e_host.store import RunStatus, RunStore, StoredFrame, open_store
from a2e_host.store.sqlite import open_sqlite_store
from tests.support.store import RecordingOutbox, on_disk, record

WAIT = 10  # seconds: the bound on every wait


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "runs.db")


def event(seq: int, node_id: str = "n", phase: str = "done") -> ChainEvent:
    return ChainEvent(req_id="q1", seq=seq, node_id=node_id, phase=phase)


def response() -> ChainResponse:
    return ChainResponse(req_id="q1", success=True)


def seqs(frames: list[bytes]) -> list[int | str]:
    """Each frame's ``seq``, or ``"resp"`` for the response, or its type."""
    out: list[int | str] = []
    for frame in frames:
        message = chain_codec.decode(frame)
        if isinstance(message, ChainEvent):
            out.append(message.seq)
        elif isinstance(message, ChainResponse):
            out.append("resp")
        else:
            out.append(message.TYPE)
    return out


async def durable(path: str, **options: Any) -> RunStore:
    store = await open_sqlite_store(path, **options)
    store.create(record("run1"))
    return store


@pytest.mark.asyncio
async def test_a_frame_reaches_the_outbox_only_once_its_batch_is_committed(path: str) -> None:
    store = await durable(path, commit_delay=60.0)  # the writer holds the batch
    disk = sqlite3.connect(path)

    def on_disk_already(frame: bytes) -> None:
        message = chain_codec.decode(frame)
        seq = message.seq if isinstance(message, ChainEvent) else None
        if seq is None:
            found = disk.execute("SELECT count(*) FROM runs WHERE run_id = 'run1' AND "
                                 "response = ?", (frame,)).fetchone()[0]
        else:
            found = [row[0] for row in on_disk(disk, "run1")].count(seq)
            assert (seq, frame) in [(row[0], row[3]) for row in on_disk(disk, "run1")]
        assert found == 1, f"frame {seq} reached the outbox before it was committed"

    outbox = RecordingOutbox(check=on_disk_already)
    sink = DurableSink(store, "run1", req_id="q1")
    sink.attach(outbox)
    try:
        for seq in range(1, 51):
            sink.send_nowait(event(seq))
        sink.send_nowait(response(), status=RunStatus.SUCCEEDED)
        for _ in range(20):
            await anyio.lowlevel.checkpoint()
        assert outbox.frames == [] and sink.uncommitted == 51
        with anyio.fail_after(WAIT):
            await store.flush()
        assert seqs(outbox.frames) == [*range(1, 51), "resp"]
        assert sink.uncommitted == 0 and sink.delivered == sink.committed_position == 51
    finally:
        disk.close()
        await store.aclose()


@pytest.mark.asyncio
async def test_outputs_and_the_last_frame_are_stored_with_the_run(path: str) -> None:
    store = await durable(path)
    sink = DurableSink(store, "run1", req_id="q1")
    try:
        sink.send_nowait(event(1, "a", "start"))
        sink.send_nowait(event(2, "a", "done"), output=b'{"v":1}')
        sink.send_nowait(response(), status=RunStatus.SUCCEEDED)
        await store.flush()
        stored = await store.frames("run1")
        assert [(f.seq, f.node_id, f.phase, f.output) for f in stored] == [
            (1, "a", "start", None), (2, "a", "done", b'{"v":1}')]
        assert seqs([f.frame for f in stored]) == [1, 2]
        found = await store.get("run1")
        assert found is not None
        assert (found.status, found.last_seq) == (RunStatus.SUCCEEDED, 2)
        assert found.response is not None and seqs([found.response]) == ["resp"]
    finally:
        await store.aclose()


async def _produce(sink: DurableSink, count: int, *, every: int = 3) -> None:
    for seq in range(sink.position + 1, sink.position + count + 1):
        sink.send_nowait(event(seq))
        if seq % every == 0:
            await sink.wait_writable()
            await anyio.lowlevel.checkpoint()


@pytest.mark.asyncio
@pytest.mark.parametrize("commit_delay", [0.0, 0.002])
async def test_attaching_behind_replays_then_goes_live_with_no_gap_and_no_duplicate(
        path: str, commit_delay: float) -> None:
    store = await durable(path, commit_delay=commit_delay)
    sink = DurableSink(store, "run1", req_id="q1", page_size=16)
    first = RecordingOutbox()
    second = RecordingOutbox()
    sink.attach(first)
    try:
        with anyio.fail_after(WAIT * 3):
            async with anyio.create_task_group() as tg:
                producing = anyio.Event()

                async def producer() -> None:
                    await _produce(sink, 300)
                    producing.set()
                    await _produce(sink, 1700)
                    sink.send_nowait(response(), status=RunStatus.SUCCEEDED)

                tg.start_soon(producer)
                await producing.wait()
                await first.wait_for(100)
                sink.detach()  # the connection dropped; the run goes on
                seen = len(first.frames)
                await sink.catch_up(second, after=100)  # a new connection, since_seq 100
                assert sink.live
            await store.flush()
        # a gapless prefix of the run (on a loaded machine the whole run, its response
        # included, may reach the first connection before it drops)
        assert seqs(first.frames) == [*range(1, 2001), "resp"][:seen]
        assert seqs(second.frames) == [*range(101, 2001), "resp"]
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_attach_behind_replays_in_the_task_the_sink_was_given(path: str) -> None:
    store = await durable(path)
    outbox = RecordingOutbox()
    try:
        async with anyio.create_task_group() as tg:
            def start_soon(fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
                tg.start_soon(fn)

            sink = DurableSink(store, "run1", req_id="q1", start_soon=start_soon,
                               page_size=7)
            await _produce(sink, 40)
            await store.flush()
            sink.attach(outbox, after=5)
            assert not sink.live
            await _produce(sink, 10)
            sink.send_nowait(response(), status=RunStatus.SUCCEEDED)
            with anyio.fail_after(WAIT):
                await store.flush()
                await outbox.wait_for(46)
        assert seqs(outbox.frames) == [*range(6, 51), "resp"]
        assert sink.live
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_attach_behind_without_a_task_to_replay_in_is_refused(path: str) -> None:
    store = await durable(path)
    sink = DurableSink(store, "run1", req_id="q1")
    try:
        await _produce(sink, 5)
        await store.flush()
        with pytest.raises(ValueError, match="use catch_up|attach with catch_up"):
            sink.attach(RecordingOutbox(), after=2)
        assert not sink.attached
        with pytest.raises(ValueError, match="beyond the run's frames"):
            sink.attach(RecordingOutbox(), after=6)
        outbox = RecordingOutbox()
        sink.attach(outbox, after=5)  # at the live position: no replay needed
        with pytest.raises(RuntimeError, match="attached to another connection"):
            sink.attach(RecordingOutbox())
        sink.send_nowait(event(6))
        await store.flush()
        assert seqs(outbox.frames) == [6]
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_a_replay_stops_when_its_connection_detaches(path: str) -> None:
    store = await durable(path)
    sink = DurableSink(store, "run1", req_id="q1", page_size=10)
    slow = RecordingOutbox(high_water=5)  # full after the first page
    try:
        await _produce(sink, 100)
        await store.flush()
        async with anyio.create_task_group() as tg:
            replaying = anyio.Event()

            async def attach() -> None:
                replaying.set()
                await sink.catch_up(slow, after=0)

            tg.start_soon(attach)
            await replaying.wait()
            with anyio.fail_after(WAIT):
                await slow.wait_for(10)
            sink.detach()
            slow.drain()
        assert seqs(slow.frames) == list(range(1, 11))  # not a page more
        again = RecordingOutbox()
        with anyio.fail_after(WAIT):
            await sink.catch_up(again, after=90)
        assert seqs(again.frames) == list(range(91, 101)) and sink.live
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_a_producer_that_waits_keeps_the_uncommitted_frames_bounded(path: str) -> None:
    store = await durable(path, commit_delay=0.001)
    sink = DurableSink(store, "run1", req_id="q1", max_uncommitted=32)
    outbox = RecordingOutbox()
    sink.attach(outbox)
    peak = 0
    try:
        with anyio.fail_after(WAIT * 3):
            for seq in range(1, 5001):
                sink.send_nowait(event(seq))
                peak = max(peak, sink.uncommitted)
                await sink.wait_writable()
            await store.flush()
        assert peak <= 33
        assert len(outbox.frames) == 5000 and sink.uncommitted == 0
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_a_resumed_run_continues_its_seq_and_replays_the_earlier_frames(
        path: str) -> None:
    store = await durable(path)
    for seq in range(1, 11):
        store.append("run1", StoredFrame(seq, "n", "done", encode_message(event(seq))))
    await store.aclose()
    store = await open_store(path)  # a restart
    try:
        record_ = await store.get("run1")
        assert record_ is not None
        sink = DurableSink(store, "run1", req_id="q1", position=record_.last_seq)
        await _produce(sink, 5)
        sink.send_nowait(response(), status=RunStatus.SUCCEEDED)
        await store.flush()
        outbox = RecordingOutbox()
        with anyio.fail_after(WAIT):
            await sink.catch_up(outbox, after=0)
        assert seqs(outbox.frames) == [*range(1, 16), "resp"]
        finished = RecordingOutbox()  # once the run is gone: straight from the store
        with anyio.fail_after(WAIT):
            last = await replay_stored(store, "run1", finished, after=12, page_size=2)
        assert last == 15 and seqs(finished.frames) == [13, 14, 15, "resp"]
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_a_broken_store_sends_one_runtime_error_and_stops_storing(path: str) -> None:
    store = await durable(path)
    failures: list[BaseException] = []
    sink = DurableSink(store, "run1", req_id="q1", capability="chains",
                       on_store_error=failures.append)
    outbox = RecordingOutbox()
    sink.attach(outbox)
    try:
        sink.send_nowait(event(1))
        await store.flush()
        writer = store._writer  # type: ignore[attr-defined]
        writer._conn.execute("PRAGMA max_page_count = 8")  # idle after the flush
        sink.send_nowait(ChainEvent(req_id="q1", seq=2, output="z" * 400_000))
        with anyio.fail_after(WAIT):
            while not failures:
                await outbox.arrived.wait()
        sink.send_nowait(event(3))  # never raises
        sink.send_nowait(response(), status=RunStatus.FAILED)
        await sink.wait_writable()  # returns at once: nobody waits on a dead store
        assert seqs(outbox.frames) == [1, "error"]
        error = chain_codec.decode(outbox.frames[1])
        assert (error.code, error.req_id, error.capability_name) == (  # type: ignore[attr-defined]
            "runtime_error", "q1", "chains")
        assert len(failures) == 1 and failures[0] is store.error
    finally:
        await store.aclose()


@pytest.mark.asyncio
async def test_a_run_started_with_a_durable_sink_sends_through_the_store(path: str) -> None:
    store = await durable(path, commit_delay=60.0)
    registry = RunRegistry(structlog.get_logger())
    outbox = RecordingOutbox()
    emitted = anyio.Event()

    async def body(run: Run) -> None:
        run.sink.send_nowait(event(1))
        emitted.set()

    try:
        async with registry.open():
            sink = DurableSink(store, "run1", req_id="q1")
            run = registry.start(body, req_id="q1", sink=sink, outbox=outbox)
            assert run.sink is sink
            with anyio.fail_after(WAIT):
                await emitted.wait()
                await run.done.wait()
            assert outbox.frames == []
            await store.flush()
        assert seqs(outbox.frames) == [1]
    finally:
        await store.aclose()
