"""Issue 19, hardening: what an agent controls cannot make telemetry grow without bound,
and the events counter moves as events are sent (README "Observability")."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from a2e_host.chains.messages import (
    ChainCancel,
    ChainEvent,
    ChainNode,
    ChainRequest,
    ChainResponse,
    TraceContext,
)
from a2e_host.config import HostConfig
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import open_memory_client
from a2e_host.telemetry import metrics, tracing
from tests.support.memory import handshaken
from tests.support.telemetry import recorded_spans

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN_ID = "00f067aa0ba902b7"


@pytest.fixture
def counters() -> Iterator[None]:
    metrics.reset()
    yield
    metrics.reset()


def scraped(name: str) -> float:
    for line in metrics.render_prometheus(metrics.Gauges()).decode().splitlines():
        if line.startswith(name + " "):
            return float(line.rpartition(" ")[2])
    raise AssertionError(f"{name} not in the exposition")


def request(req_id: str, nodes: list[dict[str, Any]], **fields: Any) -> ChainRequest:
    return ChainRequest(id=req_id, entry_node=nodes[0]["node_id"],
                        nodes=[ChainNode(**n) for n in nodes], **fields)


async def answer(host: Host, chain: ChainRequest) -> ChainResponse:
    with anyio.fail_after(20):
        async with open_memory_client(host) as client:
            await handshaken(client)
            client.send(chain)
            while not isinstance(message := await client.receive(), ChainResponse):
                pass
            return message


@pytest.mark.asyncio
async def test_chain_events_are_counted_as_they_are_sent_not_when_the_chain_ends(
    counters: None,
) -> None:
    host = Host(HostConfig(tools=("conformance",)))
    nodes = [{"node_id": "a", "kind": "tool", "name": "echo", "next_node": "b"},
             {"node_id": "b", "kind": "tool", "name": "sleep", "input": {"seconds": 60}}]
    with anyio.fail_after(20):
        async with open_memory_client(host) as client:
            await handshaken(client)
            client.send(request("slow", nodes))
            seen = 0
            while True:
                message = await client.receive()
                assert isinstance(message, ChainEvent)
                seen += 1
                if (message.node_id, message.phase) == ("b", "start"):
                    break
            # a start, a done, b start: sent, and the chain still runs
            assert (seen, scraped("a2e_chain_events_total")) == (3, 3)
            assert scraped("a2e_chains_in_flight") == 1
            client.send(ChainCancel(req_id="slow"))
            while not isinstance(message := await client.receive(), ChainResponse):
                seen += 1
    assert message.error is not None and message.error.code == "cancelled"
    assert scraped("a2e_chain_events_total") == seen == 4  # b's error event
    assert scraped("a2e_chains_in_flight") == 0
    assert metrics.chains_finished == {"cancelled": 1}


def test_label_values_past_max_series_are_counted_under_other(
    counters: None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(metrics, "MAX_SERIES", 3)
    for i in range(10):  # e.g. tools of MCP servers an agent registers under fresh names
        metrics.node_finished("tool", f"srv{i}.t", 0.002)
        metrics.chain_finished(f"code{i}")
    assert sorted(metrics.node_durations) == [
        ("tool", "_other"), ("tool", "srv0.t"), ("tool", "srv1.t"), ("tool", "srv2.t")]
    assert metrics.node_durations[("tool", "_other")][0] == 7
    assert metrics.chains_finished == {"code0": 1, "code1": 1, "code2": 1, "_other": 7}
    text = metrics.render_prometheus(metrics.Gauges()).decode()
    assert 'a2e_node_duration_seconds_count{kind="tool",tool="_other"} 7' in text
    assert text.count("a2e_node_duration_seconds_count{") == 4


@pytest.mark.asyncio
async def test_a_huge_error_message_is_cut_on_the_node_and_chain_spans() -> None:
    host = Host(HostConfig(tools=("conformance",)))
    huge = "é" * 200_000
    with recorded_spans() as exporter:
        response = await answer(host, request("r", [
            {"node_id": "f", "kind": "tool", "name": "fail", "input": {"message": huge}}]))
        spans = {s.name: s for s in exporter.get_finished_spans()}
    assert response.error is not None and huge in response.error.message
    for name in ("a2e.node", "a2e.chain"):
        description = spans[name].status.description
        assert description is not None and len(description) == tracing.MAX_ATTRIBUTE_CHARS
        assert description.endswith("é…")


@pytest.mark.parametrize("traceparent", [
    f"ff-{TRACE_ID}-{SPAN_ID}-01",  # version ff is invalid (W3C Trace Context §3.2.2.1)
    f"00-{'0' * 32}-{SPAN_ID}-01",  # all-zero trace id
    f"00-{TRACE_ID}-{'0' * 16}-01",  # all-zero parent id
    f"00-{TRACE_ID.upper()}-{SPAN_ID}-01",  # upper-case hex
    f"00-{TRACE_ID[:-1]}٣-{SPAN_ID}-01",  # a non-ASCII digit
    f"00-{TRACE_ID}-{SPAN_ID}-01-extra",  # version 00 has no more fields
    "00-" + "a" * 10_000,  # huge
    "\x00" * 64,
], ids=["version-ff", "zero-trace-id", "zero-parent-id", "upper-hex", "non-ascii-digit",
        "extra-field", "huge", "nul-bytes"])
@pytest.mark.asyncio
async def test_a_hostile_traceparent_starts_a_trace_of_its_own_and_the_chain_runs(
    traceparent: str,
) -> None:
    host = Host(HostConfig(tools=("conformance",)))
    context = TraceContext(traceparent=traceparent, tracestate="k=\u00e9," + "x" * 5000)
    with recorded_spans() as exporter:
        response = await answer(host, request("r", [
            {"node_id": "e", "kind": "tool", "name": "echo"}], trace_context=context))
        chain = next(s for s in exporter.get_finished_spans() if s.name == "a2e.chain")
    assert response.success, response.error
    assert chain.parent is None and f"{chain.context.trace_id:032x}" != TRACE_ID


@pytest.mark.asyncio
async def test_a_tool_that_reports_progress_runs_inside_its_span_and_its_reports_arrive(
) -> None:
    host = Host(HostConfig(tools=("conformance",)))
    nodes = [{"node_id": "p", "kind": "tool", "name": "progress", "input": {"steps": 5}},
             {"node_id": "q", "kind": "map", "items_path": "input.xs", "map_node": "r"},
             {"node_id": "r", "kind": "tool", "name": "progress", "input": {"steps": 2}}]
    with recorded_spans() as exporter, anyio.fail_after(20):
        async with open_memory_client(host) as client:
            await handshaken(client)
            client.send(ChainRequest(id="r", entry_node="p", initial_input={"xs": [1, 2, 3]},
                                     nodes=[ChainNode(**{**nodes[0], "next_node": "q"}),
                                            *(ChainNode(**n) for n in nodes[1:])]))
            progress: dict[str, int] = {}
            while not isinstance(message := await client.receive(), ChainResponse):
                if message.kind == "progress":
                    progress[message.node_id] = progress.get(message.node_id, 0) + 1
        spans = {s.attributes["a2e.node_id"]: s for s in exporter.get_finished_spans()
                 if s.name != "a2e.chain"}
    assert message.success, message.error
    assert message.outputs["p"] == {"steps": 5, "reported": 5}
    assert progress == {"p": 5, "r[0]": 2, "r[1]": 2, "r[2]": 2}
    assert sorted(spans) == ["p", "q", "r[0]", "r[1]", "r[2]"]
    assert {spans[k].attributes["a2e.outcome"] for k in spans} == {"done"}


@pytest.mark.parametrize("tracestate", ["k=\u00e9", "K=1", "a=1,b", "a=1,b=x=y", "=x"])
def test_an_invalid_tracestate_is_dropped_without_a_log_line(
    tracestate: str, caplog: pytest.LogCaptureFixture,
) -> None:
    from opentelemetry.trace import get_current_span

    with caplog.at_level("DEBUG"):
        context = tracing.parent_context(
            {"traceparent": f"00-{TRACE_ID}-{SPAN_ID}-01", "tracestate": tracestate})
    assert context is not None
    span_context = get_current_span(context).get_span_context()
    assert f"{span_context.trace_id:032x}" == TRACE_ID
    assert span_context.trace_state.to_header() == ""
    assert caplog.records == []


def test_a_valid_tracestate_is_kept() -> None:
    from opentelemetry.trace import get_current_span

    context = tracing.parent_context({"traceparent": f"00-{TRACE_ID}-{SPAN_ID}-01",
                                      "tracestate": "congo=t61rcWkgMzE, ro@vendor=a b"})
    assert context is not None
    assert get_current_span(context).get_span_context().trace_state.to_header() == (
        "congo=t61rcWkgMzE,ro@vendor=a b")
