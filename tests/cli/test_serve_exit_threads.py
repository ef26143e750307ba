"""A host stopped by SIGTERM says, in one message, what a worker thread still inside a
blocking call at exit means and that nothing else is lost; idle worker threads are not
reported (the real ``a2e-host serve`` with a blocking sync tool)."""

from __future__ import annotations

import errno
import os
import signal
import sys
from pathlib import Path

import anyio
import pytest

from a2e_host.chains.messages import ChainEvent
from a2e_host.client import connect_ws
from tests.support.process import WAIT
from tests.support.ws import serving_argv

EXTRA = [sys.executable, "-m", "tests.support.extra_tools_host", "serve", "--port", "0"]


async def _reader_blocked_on(fifo: Path) -> int:
    """Wait until a reader has the FIFO open; return a write end kept open, so the reader
    stays blocked in its read until it is closed."""
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
        await anyio.sleep(0.05)


@pytest.mark.asyncio
async def test_a_thread_stuck_in_a_blocking_tool_at_exit_is_named_and_explained(
        tmp_path: Path) -> None:
    fifo = tmp_path / "gate"
    os.mkfifo(fifo)
    nodes = [{"node_id": "b", "kind": "tool", "name": "block", "input": {"until": str(fifo)}}]
    writer = -1
    try:  # a short shutdown grace: the chain in flight is cancelled at once
        async with serving_argv(EXTRA, A2E_SHUTDOWN_GRACE="0.5") as (url, host):
            with anyio.fail_after(WAIT * 2):
                async with connect_ws(url, agent_caps=["chains"]) as client:
                    run = client.run_chain(nodes, "b")
                    first = await run.__anext__()
                    assert isinstance(first, ChainEvent) and first.phase == "start"
                    writer = await _reader_blocked_on(fifo)
                    host.process.send_signal(signal.SIGTERM)
                    rest = [m async for m in run]
                code = await host.wait()
    finally:
        if writer >= 0:
            os.close(writer)
    assert code == 0
    assert rest[-1].error is not None and rest[-1].error.code == "cancelled"
    lines = host.stderr.decode().splitlines()
    [said] = [line for line in lines if "worker thread" in line]
    assert said.startswith(
        "a2e-host: exiting with 1 worker thread(s) still inside a blocking call that ignored "
        "cancellation (extra_tools_host.py:")
    assert said.endswith(
        " block); that call is cut off unfinished. Nothing else is lost: every connection was "
        "answered and closed, the run store (if any) was closed, and durable runs left "
        "running resume when a host starts on the same store.")


@pytest.mark.asyncio
async def test_idle_worker_threads_at_exit_are_not_reported() -> None:
    nodes = [{"node_id": "a", "kind": "tool", "name": "echo", "input": {"args": {"v": 1}}}]
    async with serving_argv(EXTRA) as (url, host):
        with anyio.fail_after(WAIT * 2):
            async with connect_ws(url, agent_caps=["chains"]) as client:
                for _ in range(4):  # sync tools: each call takes a worker thread
                    done = await client.run_chain(nodes, "a").result()
                    assert done.success
    assert b"worker thread" not in host.stderr
