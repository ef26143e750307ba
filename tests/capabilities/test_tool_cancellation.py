"""A blocking tool sees its cancellation (PROTOCOL.md §11 Tool context): the worker thread
the host abandons learns through ``tools.context().cancelled`` / ``wait_cancelled()`` /
``check_cancelled()`` that its node was cancelled, and stops; on an in-process host."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import anyio
import pytest
from a2e_chains import ChainPlugin
from a2e_tools import ToolsPlugin

from a2e_host import tools
from a2e_host.chains.nodes import NodeContext
from a2e_host.chains.toolbox import Toolbox
from a2e_host.client import connect_memory
from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.runtime.host import Host
from a2e_host.tools import Tool

CAPS = ("chains", "tools")
WAIT = 20.0
"""Generous bound, seconds, on anything a test waits for (a loaded 2-core box)."""


class Looper:
    """A blocking tool that works in slices until its context says it was cancelled (or
    a minute passes: it never outlives the test run); each run is recorded."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.stopped = threading.Event()
        self.stops = threading.Semaphore(0)  # released once per run that stopped
        self.runs: list[dict[str, Any]] = []

    def __call__(self, args: dict[str, Any]) -> dict[str, Any]:
        ctx = tools.context()
        assert ctx is not None
        seen = {"cancelled_at_start": ctx.cancelled, "slices": 0, "cancelled": False}
        self.runs.append(seen)
        self.started.set()
        for _ in range(600):
            if ctx.wait_cancelled(0.1):
                seen["cancelled"] = True
                break
            seen["slices"] += 1
        self.stopped.set()
        self.stops.release()
        return seen


def host_with(*extra: Tool) -> Host:
    config = HostConfig(tools=["conformance"])
    registry = tools.load_tools(config)
    for t in extra:
        registry.register(t)
    return Host(config, plugins=[ChainPlugin(config, toolbox=Toolbox(registry)),
                                 ToolsPlugin(config, tools=registry)])


async def wait_thread_event(event: threading.Event) -> bool:
    return await anyio.to_thread.run_sync(event.wait, WAIT)


@pytest.mark.asyncio
async def test_a_thread_tool_looping_until_cancelled_stops_when_its_chain_is_cancelled() -> None:
    looper = Looper()
    host = host_with(Tool("loop", looper, blocking=True))
    async with connect_memory(host, agent_caps=CAPS) as client:
        run = client.run_chain([{"node_id": "l", "kind": "tool", "name": "loop"}], "l",
                               timeout=600)
        responses: list[Any] = []
        async with anyio.create_task_group() as tg:
            async def collect() -> None:
                responses.append(await run.result())

            tg.start_soon(collect)
            assert await wait_thread_event(looper.started)
            await client.cancel(run.req_id)
            assert await wait_thread_event(looper.stopped)
    [response] = responses
    assert (response.success, response.error.code) == (False, "cancelled")
    assert [(r["cancelled_at_start"], r["cancelled"]) for r in looper.runs] == [(False, True)]


@pytest.mark.asyncio
async def test_a_thread_tool_looping_until_cancelled_stops_when_its_direct_call_times_out(
) -> None:
    looper = Looper()
    host = host_with(Tool("loop", looper, blocking=True))
    async with connect_memory(host, agent_caps=CAPS) as client:
        result = await client.call_tool("loop", {}, timeout=1).result()
        assert await wait_thread_event(looper.stopped)
    assert (result.success, result.error_code) == (False, "timeout")
    assert [(r["cancelled_at_start"], r["cancelled"]) for r in looper.runs] == [(False, True)]


@pytest.mark.asyncio
async def test_a_retried_attempt_does_not_see_the_cancellation_of_the_one_before() -> None:
    looper = Looper()
    host = host_with(Tool("loop", looper, blocking=True))
    async with connect_memory(host, agent_caps=CAPS) as client:
        response = await client.run_chain(
            [{"node_id": "l", "kind": "tool", "name": "loop", "timeout": 1,
              "retry": {"max_attempts": 2, "interval": 0, "retry_on": ["timeout"]}}],
            "l", timeout=60).result()
        for _ in range(2):  # the second thread is abandoned after its timeout too
            assert await anyio.to_thread.run_sync(looper.stops.acquire, True, WAIT)
    assert (response.success, response.error.code) == (False, "chain_node_error")
    assert [(r["cancelled_at_start"], r["cancelled"]) for r in looper.runs] == [
        (False, True), (False, True)]


def test_check_cancelled_raises_once_the_invocation_is_cancelled_and_copies_start_clear(
) -> None:
    ctx = NodeContext("t[2]", "c", "r")
    ctx.check_cancelled()
    assert (ctx.cancelled, ctx.wait_cancelled(0)) == (False, False)
    ctx.mark_cancelled()
    with pytest.raises(NodeError, match="node 't\\[2\\]' was cancelled") as raised:
        ctx.check_cancelled()
    assert raised.value.code == "cancelled"
    assert (ctx.cancelled, ctx.wait_cancelled(0), ctx.for_invocation().cancelled) == (
        True, True, False)


def test_an_invocation_copy_keeps_every_other_field_of_the_context() -> None:
    ctx = NodeContext("n", "c", "r", depth=2, granted=frozenset({"chains"}),
                      max_output_bytes=7, run_subchain=None, log="log", run_key="k",
                      deadline=12.5, sink=lambda kind, data: True)
    copy = ctx.for_invocation()
    names = [f.name for f in dataclasses.fields(NodeContext) if f.name != "_cancel"]
    assert [getattr(copy, n) for n in names] == [getattr(ctx, n) for n in names]
    ctx.mark_cancelled()  # the copy's flag is its own (made on first use, never shared)
    assert (ctx.cancelled, copy.cancelled) == (True, False)
    assert ctx.for_invocation().cancelled is False


@pytest.mark.asyncio
async def test_a_thread_tool_looping_until_cancelled_stops_when_its_connection_drops() -> None:
    looper = Looper()
    host = host_with(Tool("loop", looper, blocking=True))
    async with connect_memory(host, agent_caps=CAPS) as client:
        call = client.call_tool("loop", {}, timeout=600)
        async with anyio.create_task_group() as tg:
            tg.start_soon(call.result)
            assert await wait_thread_event(looper.started)
            tg.cancel_scope.cancel()  # stop waiting; leaving the block drops the connection
        await call.aclose()  # only stops listening: the tool still runs
        assert not looper.stopped.is_set()
    assert await wait_thread_event(looper.stopped)
    assert [(r["cancelled_at_start"], r["cancelled"]) for r in looper.runs] == [(False, True)]
