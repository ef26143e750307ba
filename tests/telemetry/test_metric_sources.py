"""Issue 19, metrics: each counter the README lists moves where its event happens
(outbox backpressure, dropped log lines), and the ``trace_context`` extension is
advertised in the handshake's ``features``."""

from __future__ import annotations

import os
from collections.abc import Iterator

import anyio
import pytest

from a2e_host import logs
from a2e_host.config import HostConfig
from a2e_host.messages import HandshakeRequest, HandshakeResponse
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import open_memory_client
from a2e_host.runtime.outbox import Outbox
from a2e_host.telemetry import metrics
from a2e_host.telemetry.endpoints import HostEndpoints


@pytest.fixture
def counters() -> Iterator[None]:
    metrics.reset()
    yield
    metrics.reset()


@pytest.mark.asyncio
async def test_a_producer_waiting_for_a_full_outbox_is_counted_once_per_wait(
    counters: None,
) -> None:
    outbox = Outbox(high_water=1)
    outbox.send_frame_nowait(b"a")
    outbox.send_frame_nowait(b"b")
    waited = anyio.Event()

    async def producer() -> None:
        await outbox.wait_writable()
        waited.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(producer)
            while metrics.backpressure_waits == 0:
                await anyio.lowlevel.checkpoint()
            assert not waited.is_set()
            frames = await outbox.receive_batch()
            outbox.batch_sent(len(frames))
            await waited.wait()
    assert metrics.backpressure_waits == 1
    assert b"a2e_outbox_backpressure_waits_total 1\n" in metrics.render_prometheus(
        metrics.Gauges())


def test_dropped_log_lines_reach_the_metrics_gauge(monkeypatch: pytest.MonkeyPatch) -> None:
    read, write = os.pipe()
    try:
        writer = logs.LogWriter(write, max_queued_bytes=8)
        monkeypatch.setattr(logs, "_writers", {write: writer})
        for _ in range(3):
            writer.write("a line longer than eight bytes\n")
        gauges = HostEndpoints(Host(HostConfig())).gauges()
    finally:
        os.close(read)
        os.close(write)
    assert (writer.dropped_total, gauges.log_lines_dropped) == (3, 3)
    assert b"a2e_log_lines_dropped_total 3\n" in metrics.render_prometheus(gauges)


@pytest.mark.asyncio
async def test_the_trace_context_extension_is_advertised_in_the_chains_features() -> None:
    with anyio.fail_after(10):
        async with open_memory_client(Host(HostConfig())) as client:
            client.send(HandshakeRequest(agent_caps=["chains"]))
            answer = await client.receive()
    assert isinstance(answer, HandshakeResponse) and answer.ok
    assert "chain/req.trace_context" in answer.accepted_caps[0].metadata["features"]


def test_a_large_metrics_text_is_reused_for_a_second_a_small_one_never(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from a2e_host.telemetry import endpoints as module

    sizes = iter([module.LARGE_RENDER + 1, 10, 10])
    renders: list[bytes] = []

    def render(_gauges: metrics.Gauges) -> bytes:
        renders.append(body := b"x" * next(sizes))
        return body

    monkeypatch.setattr(metrics, "render_prometheus", render)
    times = iter([0.0, 0.5, 0.99,  # large: reused within RENDER_INTERVAL
                  1.0,  # past it: rendered again, small this time
                  1.01])  # small: never reused
    endpoints = HostEndpoints(Host(HostConfig()), clock=lambda: next(times))
    bodies = [len(endpoints.metrics()[2]) for _ in range(5)]
    assert bodies == [module.LARGE_RENDER + 1] * 3 + [10, 10]
    assert len(renders) == 3
