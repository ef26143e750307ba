"""Issue 19, traces: a span per chain request, node and sampled map item, children of the
agent's ``trace_context`` (PROTOCOL.md §5 Trace context)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from a2e_host.chains.messages import ChainNode, ChainRequest, ChainResponse, TraceContext
from a2e_host.config import HostConfig
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import open_memory_client
from a2e_host.telemetry import chain_spans, tracing
from tests.support.memory import handshaken
from tests.support.telemetry import recorded_spans, span_tree

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
AGENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{AGENT_SPAN}-01"

SHOUT = {"name": "shout", "version": "1", "entry_node": "join",
         "input_schema": {"type": "object", "properties": {"parts": {"type": "array"}}},
         "nodes": [
             {"node_id": "join", "kind": "tool", "name": "concat",
              "input_map": {"parts": "input.parts"}, "next_node": "up"},
             {"node_id": "up", "kind": "tool", "name": "upper",
              "input_map": {"text": "join.output.text"}},
         ]}

# 12 items: the first MAP_ITEM_SPANS (10) get a span; item 10 succeeds without one; item
# 11 (a number: upper refuses it) fails under on_error skip and gets one after the fact
ITEMS = [*"abcdefghijk", 5]

NODES: list[dict[str, Any]] = [
    {"node_id": "b", "kind": "branch", "condition": "input.go", "true_node": "m",
     "false_node": "never"},
    {"node_id": "m", "kind": "map", "items_path": "input.items", "map_node": "t",
     "next_node": "bad"},
    {"node_id": "t", "kind": "tool", "name": "upper", "input_map": {"text": "item"},
     "on_error": "skip"},
    {"node_id": "bad", "kind": "tool", "name": "fail", "input": {"message": "boom"},
     "on_error": "h"},
    {"node_id": "h", "kind": "tool", "name": "echo", "input_map": {"e": "error.code"},
     "next_node": "s"},
    {"node_id": "s", "kind": "skill", "name": "shout", "input": {"parts": ["x", "y"]}},
    {"node_id": "never", "kind": "tool", "name": "echo"},
]


@pytest.fixture
def host(tmp_path: Path) -> Host:
    skills = tmp_path / "skills"
    skills.mkdir()
    (skills / "shout.json").write_text(json.dumps(SHOUT))
    return Host(HostConfig(tools=("conformance",), skills_dirs=(str(skills),)))


async def run_chain(host: Host, **fields: Any) -> ChainResponse:
    with anyio.fail_after(20):
        async with open_memory_client(host) as client:
            await handshaken(client, ("chains", "skill"))
            client.send(ChainRequest(id="r1", chain_id="c1", entry_node="b",
                                     nodes=[ChainNode(**n) for n in NODES],
                                     initial_input={"go": True, "items": ITEMS}, **fields))
            while True:
                message = await client.receive()
                if isinstance(message, ChainResponse):
                    return message


@pytest.mark.asyncio
async def test_a_chain_makes_the_exact_span_tree_under_the_agents_traceparent(
    host: Host,
) -> None:
    with recorded_spans() as exporter:
        response = await run_chain(host, trace_context=TraceContext(
            traceparent=TRACEPARENT, tracestate="vendor=1"))
        spans = exporter.get_finished_spans()
    assert response.success, response.error
    assert span_tree(spans) == sorted([
        ("a2e.chain", "", "<remote>"),
        ("a2e.node", "b", "a2e.chain"),
        ("a2e.node", "m", "a2e.chain"),
        *[("a2e.map.item", f"t[{i}]", "m") for i in range(chain_spans.MAP_ITEM_SPANS)],
        ("a2e.map.item", "t[11]", "m"),
        ("a2e.node", "bad", "a2e.chain"),
        ("a2e.node", "h", "a2e.chain"),
        ("a2e.node", "s", "a2e.chain"),
        ("a2e.node", "s/join", "s"),
        ("a2e.node", "s/up", "s"),
    ])
    chain = next(s for s in spans if s.name == "a2e.chain")
    assert f"{chain.context.trace_id:032x}" == TRACE_ID
    assert chain.parent is not None and f"{chain.parent.span_id:016x}" == AGENT_SPAN
    assert chain.parent.is_remote
    assert {f"{s.context.trace_id:032x}" for s in spans} == {TRACE_ID}
    assert dict(chain.attributes or {}) == {
        "a2e.req_id": "r1", "a2e.chain_id": "c1", "a2e.nodes": 7, "a2e.outcome": "ok",
        "a2e.nodes_run": 5,
    }


@pytest.mark.asyncio
async def test_node_spans_carry_ids_kind_tool_outcome_error_code_and_attempts(
    host: Host,
) -> None:
    with recorded_spans() as exporter:
        await run_chain(host)
        spans = {s.attributes["a2e.node_id"]: s for s in exporter.get_finished_spans()
                 if s.name != "a2e.chain"}
    ids = {"a2e.req_id": "r1", "a2e.chain_id": "c1"}
    assert dict(spans["b"].attributes) == {
        **ids, "a2e.node_id": "b", "a2e.node.kind": "branch", "a2e.outcome": "done"}
    assert dict(spans["m"].attributes) == {
        **ids, "a2e.node_id": "m", "a2e.node.kind": "map", "a2e.outcome": "done"}
    assert dict(spans["t[3]"].attributes) == {
        **ids, "a2e.node_id": "t[3]", "a2e.node.kind": "tool", "a2e.tool.name": "upper",
        "a2e.map.index": 3, "a2e.outcome": "done", "a2e.attempts": 1}
    failed_item = spans["t[11]"]
    assert failed_item.attributes["a2e.outcome"] == "error"
    assert failed_item.attributes["a2e.error.code"] == "chain_node_error"
    assert failed_item.attributes["a2e.map.index"] == 11
    bad = spans["bad"]
    assert dict(bad.attributes) == {
        **ids, "a2e.node_id": "bad", "a2e.node.kind": "tool", "a2e.tool.name": "fail",
        "a2e.outcome": "error", "a2e.error.code": "chain_node_error", "a2e.attempts": 1}
    assert bad.status.status_code.name == "ERROR" and "boom" in bad.status.description
    assert spans["s"].attributes["a2e.tool.name"] == "shout"
    assert spans["s/up"].attributes["a2e.outcome"] == "done"
    assert spans["h"].status.status_code.name == "UNSET"


@pytest.mark.asyncio
async def test_without_trace_context_the_chain_span_starts_a_new_trace(host: Host) -> None:
    with recorded_spans() as exporter:
        await run_chain(host, trace_context=TraceContext(traceparent="00-not-a-header-01"))
        chain = next(s for s in exporter.get_finished_spans() if s.name == "a2e.chain")
    assert chain.parent is None


@pytest.mark.asyncio
async def test_tracing_off_makes_no_span_and_runs_the_plain_attempt(host: Host) -> None:
    from a2e_host.chains.attempt import run_attempt

    assert tracing.ENABLED is False
    assert chain_spans.attempt_runner(run_attempt) is run_attempt
    assert chain_spans.item_runner(run_attempt) is run_attempt
    assert type(chain_spans.reports_for_run()) is dict
    response = await run_chain(host, trace_context=TraceContext(traceparent=TRACEPARENT))
    assert response.success


async def run_nodes(host: Host, nodes: list[dict[str, Any]], caps: tuple[str, ...] = ("chains",),
                    **fields: Any) -> ChainResponse:
    with anyio.fail_after(20):
        async with open_memory_client(host) as client:
            await handshaken(client, caps)
            client.send(ChainRequest(id="r2", entry_node=nodes[0]["node_id"],
                                     nodes=[ChainNode(**n) for n in nodes], **fields))
            while True:
                message = await client.receive()
                if isinstance(message, ChainResponse):
                    return message


@pytest.mark.asyncio
async def test_a_retried_node_span_counts_its_attempts(host: Host) -> None:
    node = {"node_id": "f", "kind": "tool", "name": "flaky",
            "input": {"key": "span-attempts", "failures": 2},
            "retry": {"max_attempts": 3, "interval": 0, "jitter": "none"}}
    with recorded_spans() as exporter:
        response = await run_nodes(host, [node])
        (span,) = [s for s in exporter.get_finished_spans() if s.name == "a2e.node"]
    assert response.success, response.error
    assert (span.attributes["a2e.attempts"], span.attributes["a2e.outcome"]) == (3, "done")


@pytest.mark.asyncio
async def test_a_proc_child_sees_the_nodes_span_as_traceparent(tmp_path: Path) -> None:
    host = Host(HostConfig(allow_proc=("env",), root=str(tmp_path)))
    node = {"node_id": "p", "kind": "proc", "input": {"argv": ["env"]}}
    with recorded_spans() as exporter:
        response = await run_nodes(host, [node], ("chains", "proc"),
                                   trace_context=TraceContext(traceparent=TRACEPARENT,
                                                              tracestate="vendor=1"))
        (span,) = [s for s in exporter.get_finished_spans() if s.name == "a2e.node"]
    assert response.success, response.error
    env = dict(line.split("=", 1) for line in response.outputs["p"]["stdout"].splitlines())
    assert env["TRACEPARENT"] == f"00-{TRACE_ID}-{span.context.span_id:016x}-01"
    assert env["TRACESTATE"] == "vendor=1"


@pytest.mark.asyncio
async def test_a_proc_child_gets_no_traceparent_while_tracing_is_off(tmp_path: Path) -> None:
    host = Host(HostConfig(allow_proc=("env",), root=str(tmp_path)))
    node = {"node_id": "p", "kind": "proc", "input": {"argv": ["env"]}}
    response = await run_nodes(host, [node], ("chains", "proc"),
                               trace_context=TraceContext(traceparent=TRACEPARENT))
    assert response.success, response.error
    assert "TRACEPARENT" not in response.outputs["p"]["stdout"]


@pytest.mark.asyncio
async def test_a_thread_tool_and_a_loop_tool_run_inside_their_nodes_span() -> None:
    from a2e_chains import ChainPlugin
    from opentelemetry import trace

    from a2e_host import tools
    from a2e_host.chains.toolbox import Toolbox

    def current_span_id() -> dict[str, str]:
        return {"span": f"{trace.get_current_span().get_span_context().span_id:016x}"}

    @tools.tool(blocking=True)
    def in_thread() -> dict[str, str]:
        """The span current in a worker thread."""
        return current_span_id()

    @tools.tool(blocking=False)
    async def on_loop() -> dict[str, str]:
        """The span current on the event loop."""
        return current_span_id()

    config = HostConfig(tools=("conformance",))
    registry = tools.load_tools(config)
    registry.register(in_thread)
    registry.register(on_loop)
    host = Host(config, plugins=[ChainPlugin(config, toolbox=Toolbox(registry))])
    nodes = [{"node_id": "t", "kind": "tool", "name": "in_thread", "next_node": "l"},
             {"node_id": "l", "kind": "tool", "name": "on_loop"}]
    with recorded_spans() as exporter:
        response = await run_nodes(host, nodes)
        spans = {s.attributes["a2e.node_id"]: s for s in exporter.get_finished_spans()
                 if s.name == "a2e.node"}
    assert response.success, response.error
    assert response.outputs == {
        node: {"span": f"{spans[node].context.span_id:016x}"} for node in ("t", "l")}


def test_an_oversized_trace_context_is_ignored_or_its_tracestate_dropped() -> None:
    from opentelemetry.trace import get_current_span

    long_parent = TRACEPARENT + "-" + "0" * tracing.MAX_TRACEPARENT_CHARS
    assert tracing.parent_context({"traceparent": long_parent}) is None
    kept = tracing.parent_context({"traceparent": TRACEPARENT, "tracestate": "v=1"})
    dropped = tracing.parent_context(
        {"traceparent": TRACEPARENT, "tracestate": "v=" + "1" * tracing.MAX_TRACESTATE_CHARS})
    assert kept is not None and dropped is not None
    assert get_current_span(kept).get_span_context().trace_state.to_header() == "v=1"
    assert get_current_span(dropped).get_span_context().trace_state.to_header() == ""
    assert f"{get_current_span(dropped).get_span_context().trace_id:032x}" == TRACE_ID
