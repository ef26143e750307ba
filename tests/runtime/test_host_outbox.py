"""The per-connection Outbox: order, no drops, backpressure at the high-water mark."""

from __future__ import annotations

import anyio
import pytest

from a2e_host.chains.messages import chain_codec
from a2e_host.messages import Ping
from a2e_host.runtime.outbox import Outbox


@pytest.mark.asyncio
async def test_frames_leave_in_order_without_drops_past_the_high_water_mark() -> None:
    outbox = Outbox(high_water=2)
    sent = [Ping(id=f"m{i}") for i in range(10)]
    for message in sent:
        outbox.send_nowait(message)  # never blocks, never drops
    assert len(outbox) == 10
    batch = await outbox.receive_batch(max_frames=4)
    rest = await outbox.receive_batch()
    assert [chain_codec.decode(f).id for f in batch + rest] == [m.id for m in sent]


@pytest.mark.asyncio
async def test_wait_writable_waits_while_over_the_mark_and_resumes_when_drained() -> None:
    outbox = Outbox(high_water=2)
    for i in range(3):
        outbox.send_nowait(Ping(id=f"m{i}"))
    resumed = anyio.Event()

    async def producer() -> None:
        await outbox.wait_writable()
        resumed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(producer)
        await anyio.wait_all_tasks_blocked()
        assert not resumed.is_set()
        batch = await outbox.receive_batch(max_frames=1)
        outbox.batch_sent(len(batch))
        with anyio.fail_after(5):
            await resumed.wait()


@pytest.mark.asyncio
async def test_wait_flushed_returns_once_the_writer_has_written_everything() -> None:
    outbox = Outbox(high_water=8)
    outbox.send_nowait(Ping())
    flushed = anyio.Event()

    async def flusher() -> None:
        await outbox.wait_flushed()
        flushed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(flusher)
        batch = await outbox.receive_batch()
        await anyio.wait_all_tasks_blocked()
        assert not flushed.is_set()  # taken, not yet written
        outbox.batch_sent(len(batch))
        with anyio.fail_after(5):
            await flushed.wait()


@pytest.mark.asyncio
async def test_a_closed_outbox_discards_frames_and_ends_the_writer() -> None:
    outbox = Outbox(high_water=1)
    outbox.send_nowait(Ping(id="kept"))
    outbox.close()
    outbox.send_nowait(Ping(id="discarded"))
    await outbox.wait_writable()  # never hangs on a dead connection
    assert [chain_codec.decode(f).id for f in await outbox.receive_batch()] == ["kept"]
    with pytest.raises(anyio.EndOfStream):
        await outbox.receive_batch()


@pytest.mark.asyncio
async def test_a_few_big_frames_hold_producers_back_by_bytes_not_only_by_count() -> None:
    outbox = Outbox(high_water=1000, high_water_bytes=1000)
    outbox.send_frame_nowait(b"x" * 600)
    outbox.send_frame_nowait(b"y" * 600)  # 2 frames, far under the count, over the bytes
    assert outbox.queued_bytes == 1200
    resumed = anyio.Event()

    async def producer() -> None:
        await outbox.wait_writable()
        resumed.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(producer)
        await anyio.wait_all_tasks_blocked()
        assert not resumed.is_set()
        batch = await outbox.receive_batch(max_frames=1)
        assert batch == [b"x" * 600]
        assert outbox.queued_bytes == 600
        with anyio.fail_after(5):
            await resumed.wait()
