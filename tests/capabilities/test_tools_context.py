"""The tool context (PROTOCOL.md §5, §11): a running tool's idempotency key, deadline and
reports, in a chain and in a direct call, on an in-process host."""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

import anyio
import pytest
from a2e_chains import ChainPlugin
from a2e_tools import ToolsPlugin

from a2e_host import tools
from a2e_host.chains.events import EventStream
from a2e_host.chains.nodes import MAX_REPORTS, NodeContext
from a2e_host.chains.reports import NodeReports
from a2e_host.chains.toolbox import Toolbox
from a2e_host.client import HostError, connect_memory
from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.runtime.host import Host
from a2e_host.tools import Tool

CAPS = ("chains", "tools")


def host_with(*extra: Tool) -> Host:
    """An in-process host serving the conformance tools plus ``extra``."""
    config = HostConfig(tools=["conformance"])
    registry = tools.load_tools(config)
    for t in extra:
        registry.register(t)
    return Host(config, plugins=[ChainPlugin(config, toolbox=Toolbox(registry)),
                                 ToolsPlugin(config, tools=registry)])


def key_of(run_key: str, node_id: str) -> str:
    return hashlib.sha256(f"{run_key}\n{node_id}".encode()).hexdigest()


class KeyTool:
    """Returns its context's idempotency key; fails the first ``failures`` calls."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.keys: list[str] = []

    def __call__(self, args: dict[str, Any]) -> dict[str, Any]:
        ctx = tools.context()
        assert ctx is not None
        self.keys.append(ctx.idempotency_key)
        if len(self.keys) <= self.failures:
            raise NodeError("fails on purpose", retryable=True)
        return {"key": ctx.idempotency_key}


@pytest.mark.asyncio
async def test_a_report_in_a_chain_is_a_progress_event_of_the_running_node() -> None:
    async with connect_memory(host_with(), agent_caps=CAPS) as client:
        run = client.run_chain([{"node_id": "p", "kind": "tool", "name": "progress",
                                 "input": {"steps": 2}}], "p")
        events = [m async for m in run]
    response = events.pop()
    assert response.success and response.final_output == {"steps": 2, "reported": 2}
    assert [(e.seq, e.node_id, e.phase, e.kind, e.data) for e in events] == [
        (1, "p", "start", "status", {}),
        (2, "p", "start", "progress", {"report": "progress", "pct": 50, "message": "step 1 of 2"}),
        (3, "p", "start", "progress", {"report": "progress", "pct": 100,
                                       "message": "step 2 of 2"}),
        (4, "p", "done", "status", {}),
    ]


@pytest.mark.asyncio
async def test_a_tool_flooding_reports_in_a_chain_sends_at_most_the_cap() -> None:
    async with connect_memory(host_with(), agent_caps=CAPS) as client:
        run = client.run_chain([{"node_id": "p", "kind": "tool", "name": "progress",
                                 "input": {"steps": 5000}}], "p")
        events = [m async for m in run]
    response = events.pop()
    assert response.final_output == {"steps": 5000, "reported": MAX_REPORTS}
    assert [e.kind for e in events].count("progress") == MAX_REPORTS == 256
    assert [e.seq for e in events] == list(range(1, MAX_REPORTS + 3))


@pytest.mark.asyncio
async def test_the_idempotency_key_is_the_same_for_every_attempt_and_apart_per_map_item() -> None:
    keyed = KeyTool(failures=1)
    plain = KeyTool()
    host = host_with(Tool("keyed", keyed, blocking=False), Tool("plain", plain, blocking=False))
    async with connect_memory(host, agent_caps=CAPS) as client:
        run = client.run_chain([
            {"node_id": "k", "kind": "tool", "name": "keyed",
             "retry": {"max_attempts": 2, "interval": 0}},
            {"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t"},
            {"node_id": "t", "kind": "tool", "name": "plain"},
        ], "k", initial_input={"xs": [1, 2]})
        response = await run.result()
        session = client.session_id
    assert response.success, response.error
    run_key = f"{session}/{run.req_id}"
    assert keyed.keys == [key_of(run_key, "k")] * 2
    assert sorted(plain.keys) == sorted([key_of(run_key, "t[0]"), key_of(run_key, "t[1]")])


@pytest.mark.asyncio
async def test_a_direct_call_sees_its_key_and_its_deadline() -> None:
    def facts(args: dict[str, Any]) -> dict[str, Any]:
        ctx = tools.context()
        assert ctx is not None and ctx.deadline is not None
        return {"key": ctx.idempotency_key, "left": ctx.deadline - time.monotonic()}

    host = host_with(Tool("facts", facts, blocking=False))
    async with connect_memory(host, agent_caps=CAPS) as client:
        call = client.call_tool("facts", {}, timeout=7)
        result = await call.result()
        session = client.session_id
    assert result.success, result.error
    assert result.data["key"] == key_of(f"{session}/{call.req_id}", "call")
    assert 5 < result.data["left"] <= 7


@pytest.mark.asyncio
async def test_a_node_timeout_shortens_the_deadline_a_tool_sees() -> None:
    seen: list[float] = []

    def facts(args: dict[str, Any]) -> None:
        ctx = tools.context()
        assert ctx is not None and ctx.deadline is not None
        seen.append(ctx.deadline - time.monotonic())

    host = host_with(Tool("facts", facts, blocking=False))
    async with connect_memory(host, agent_caps=CAPS) as client:
        response = await client.run_chain(
            [{"node_id": "f", "kind": "tool", "name": "facts", "timeout": 2}], "f",
            timeout=60).result()
    assert response.success
    assert len(seen) == 1 and 0 < seen[0] <= 2


@pytest.mark.asyncio
async def test_a_blocking_tool_reports_from_its_worker_thread() -> None:
    threads: list[bool] = []

    def work(args: dict[str, Any]) -> dict[str, Any]:
        threads.append(threading.current_thread() is not threading.main_thread())
        sent = [tools.report("log", {"level": "info", "message": f"line {i}"}) for i in range(3)]
        return {"sent": sent}

    host = host_with(Tool("work", work, blocking=True))
    async with connect_memory(host, agent_caps=CAPS) as client:
        call = client.call_tool("work", {}, streaming=True)
        result = await call.result()
    assert threads == [True]
    assert result.data == {"sent": [True, True, True]}
    assert [(e.kind, e.seq, e.data) for e in call.events] == [
        ("log", i + 1, {"level": "info", "message": f"line {i}"}) for i in range(3)
    ]


@pytest.mark.asyncio
async def test_a_call_without_streaming_gets_its_reports_in_the_result() -> None:
    async with connect_memory(host_with(), agent_caps=CAPS) as client:
        call = client.call_tool("progress", {"steps": 2}, streaming=False)
        messages = [m async for m in call]
    assert [m.TYPE for m in messages] == ["tool/call/resp"]
    result = messages[0].data
    assert [(e.kind, e.seq, e.data["pct"]) for e in result.events] == [
        ("progress", 1, 50), ("progress", 2, 100)]


def test_outside_a_node_there_is_no_context_and_reports_go_nowhere() -> None:
    @tools.tool(blocking=False)
    def shout(text: str) -> str:
        return text.upper() if not tools.report("log", {"message": text}) else "sent"

    assert tools.context() is None
    assert tools.report("progress", {"pct": 1}) is False
    assert anyio.run(shout.invoke, {"text": "a"}) == "A"


def test_a_report_of_an_unknown_kind_or_unencodable_data_is_refused() -> None:
    ctx = NodeContext("n", "c", "r", sink=lambda kind, data: True)
    with pytest.raises(ValueError, match="report kind 'progres' is not one of progress, log"):
        ctx.report("progres", {})
    with pytest.raises(ValueError, match="report data must be a JSON-able mapping"):
        ctx.report("log", {"x": object()})
    assert ctx.report("log", {"message": "x" * 5000}) is False  # over MAX_REPORT_BYTES
    assert ctx.report("log", {"message": "x"}) is True


def test_reports_past_the_cap_or_after_the_node_ended_are_dropped() -> None:
    sent: list[Any] = []
    events = EventStream(sent.append, "r1", streaming=True)
    sink = NodeReports(events, "t[2]")
    assert all(sink("progress", {"pct": i}) for i in range(MAX_REPORTS))
    assert sink("progress", {"pct": 0}) is False
    assert (len(sent), sink.sent, sink.dropped) == (MAX_REPORTS, MAX_REPORTS, 1)
    first = sent[0]
    assert (first.seq, first.node_id, first.phase, first.kind, first.data) == (
        1, "t[2]", "start", "progress", {"report": "progress", "pct": 0})
    late = NodeReports(events, "t[3]")
    late.close()
    assert late("log", {"report": "x"}) is False and late.dropped == 1
    assert len(sent) == MAX_REPORTS


def test_a_report_keeps_its_kind_even_when_its_data_has_a_report_key() -> None:
    sent: list[Any] = []
    sink = NodeReports(EventStream(sent.append, "r1", streaming=True), "n")
    assert sink("log", {"report": "progress", "message": "m"})
    assert sent[0].data == {"report": "log", "message": "m"}


@pytest.mark.asyncio
async def test_a_direct_call_is_cancelled_when_its_connection_drops() -> None:
    started = anyio.Event()
    cancelled = anyio.Event()

    async def wait_forever(args: dict[str, Any]) -> None:
        started.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.set()

    host = host_with(Tool("wait", wait_forever))
    async with host.running():
        async with connect_memory(host, agent_caps=CAPS) as client:
            call = await client.call_tool("wait", {}, timeout=600).start()
            with anyio.fail_after(10):
                await started.wait()
            assert call.response is None
            await call.aclose()
        with anyio.fail_after(10):
            await cancelled.wait()


@pytest.mark.asyncio
async def test_direct_calls_count_against_max_parallel_apart_from_chains() -> None:
    release = anyio.Event()
    running = 0
    both = anyio.Event()

    async def hold(args: dict[str, Any]) -> str:
        nonlocal running
        running += 1
        if running == 2:
            both.set()
        await release.wait()
        return "held"

    host = host_with(Tool("hold", hold))
    async with connect_memory(host, agent_caps=CAPS, limits={"max_parallel": 2}) as client:
        first = await client.call_tool("hold", {}).start()
        second = await client.call_tool("hold", {}).start()
        with anyio.fail_after(10):
            await both.wait()
        with pytest.raises(HostError) as refused:
            await client.call_tool("add", {"a": 1, "b": 2}).result()
        assert refused.value.code == "busy"
        assert "2 tool calls are in flight on this session, the max_parallel limit is 2" in str(
            refused.value)
        chain = await client.run_chain([{"node_id": "a", "kind": "tool", "name": "add",
                                         "input": {"a": 1, "b": 2}}], "a").result()
        assert chain.final_output == {"sum": 3}
        release.set()
        assert [(await first.result()).data, (await second.result()).data] == ["held", "held"]
        assert (await client.call_tool("add", {"a": 1, "b": 2}).result()).data == {"sum": 3}


def test_a_worker_thread_reporting_past_the_cap_does_not_hop_to_the_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[Any] = []
    hops: list[int] = []
    real_run_sync = anyio.from_thread.run_sync

    def counting_run_sync(fn: Any, *args: Any) -> Any:
        hops.append(1)
        return real_run_sync(fn, *args)

    monkeypatch.setattr(anyio.from_thread, "run_sync", counting_run_sync)

    async def main() -> NodeReports:
        sink = NodeReports(EventStream(sent.append, "r1", streaming=True), "t")

        def tool() -> None:
            for i in range(MAX_REPORTS + 5000):
                sink("progress", {"pct": i % 100})

        await anyio.to_thread.run_sync(tool)
        return sink

    sink = anyio.run(main)
    assert (len(sent), sink.sent, sink.dropped) == (MAX_REPORTS, MAX_REPORTS, 5000)
    assert len(hops) == MAX_REPORTS  # the 5,000 past the cap never reached the loop
