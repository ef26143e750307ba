"""The scheduler agrees with the sequential reference interpreter on random chains
(PROTOCOL.md §3–§5, §8).

Chains are random DAGs: tool nodes, branches and maps over small lists, with
``next_node`` / branch sides / ``on_error`` handlers pointing to later nodes and data
reads of earlier ones; some tools fail, with random ``abort`` / ``skip`` / handler
policies. Tools are deterministic, so outputs are too; only the order of parallel events
may differ. When an abort ends the chain, which nodes got to run first is up to the
scheduler: then only what is deterministic is compared.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import anyio.lowlevel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2e_host.chains.messages import ChainEvent, ChainNode, ChainRequest, ChainResponse
from a2e_host.chains.nodes import NodeContext
from a2e_host.chains.scheduler import ChainRunner
from a2e_host.chains.validation import validate_chain
from a2e_host.exceptions import ChainInvalid, NodeError
from a2e_host.limits import Limits, SessionLimits
from a2e_host.messages import Message
from tests.support.chains import FakeCatalog
from tests.support.reference_interpreter import (
    RefResult,
    ToolFailure,
    check_event_stream,
    final_output,
    interpret,
)

TOOLS = ("ok", "bad", "bad_odd")


def tool_result(name: str, shown: str, args: dict[str, Any]) -> Any:
    """The one deterministic behaviour both sides use: ``bad`` fails, ``bad_odd`` fails on
    odd items, anything else returns who ran with what."""
    if name == "bad" or (name == "bad_odd" and args.get("item", 0) % 2 == 1):
        raise ToolFailure(f"{shown} failed on purpose")
    return {"by": shown, "args": args}


def reference_tool(node: dict[str, Any], shown: str, args: dict[str, Any]) -> Any:
    return tool_result(node["name"], shown, args)


async def scheduler_tool(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
    await anyio.lowlevel.checkpoint()  # let parallel nodes interleave
    try:
        return tool_result(node.name, ctx.node_id, args)
    except ToolFailure as exc:
        raise NodeError(str(exc)) from None


@st.composite
def chains(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A random valid chain (its node dicts) and its initial input."""
    count = draw(st.integers(2, 7))
    ids = [f"n{i}" for i in range(count)]
    initial = {
        "f0": draw(st.booleans()),
        "f1": draw(st.booleans()),
        "xs": draw(st.lists(st.integers(0, 3), max_size=3)),
    }
    nodes: list[dict[str, Any]] = []
    handlers_taken: set[str] = set()
    for i, nid in enumerate(ids):
        earlier, later = ids[:i], ids[i + 1 :]
        kind = draw(st.sampled_from(["tool", "tool", "tool", "branch", "map"]))
        if kind == "branch" and not later:
            kind = "tool"
        node: dict[str, Any] = {"node_id": nid, "kind": kind}
        if later and draw(st.booleans()):
            node["next_node"] = draw(st.sampled_from(later))
        reads = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=2)) if earlier else []
        input_map = {f"from_{r}": f"{r}.output" for r in reads}
        if draw(st.booleans()):
            input_map["activated_by"] = "output"
        free = [h for h in later if h not in handlers_taken]
        policy = draw(st.sampled_from(["abort", "skip", "handler"] if free else ["abort", "skip"]))
        if policy == "handler":
            handler = draw(st.sampled_from(free))
            handlers_taken.add(handler)
            node["on_error"] = handler
        else:
            node["on_error"] = policy
        template: dict[str, Any] | None = None
        if kind == "tool":
            node["name"] = draw(st.sampled_from(["ok", "ok", "ok", "bad"]))
            node["input"] = {"static": i}
            node["input_map"] = input_map
            if nid in handlers_taken:
                node["input_map"]["failed"] = "error.node_id"
        elif kind == "branch":
            sources = ["input.f0", "input.f1", "`null`", *(f"{r}.output" for r in earlier)]
            node["condition"] = draw(st.sampled_from(sources))
            node["true_node"] = draw(st.sampled_from(["", *later]))
            rest = [x for x in later if x != node["true_node"]]
            node["false_node"] = draw(st.sampled_from(["", *rest])) if rest else ""
            if not node["true_node"] and not node["false_node"]:
                node["true_node"] = later[0]
            node["input_map"] = {f"from_{r}": f"{r}.output" for r in reads}
        else:
            tid = f"t{i}"
            node["map_node"] = tid
            literal = draw(st.lists(st.integers(0, 3), max_size=3))
            node["items_path"] = draw(
                st.sampled_from(["input.xs", "`" + ", ".join(map(str, literal)).join("[]") + "`"])
            )
            node["input_map"] = {f"from_{r}": f"{r}.output" for r in reads}
            template = {
                "node_id": tid,
                "kind": "tool",
                "name": draw(st.sampled_from(["ok", "ok", "bad_odd", "bad"])),
                "input_map": {"item": "item", "index": "index"},
                "on_error": draw(st.sampled_from(["abort", "skip"])),
            }
        nodes.append(node)
        if template is not None:
            nodes.append(template)
    return nodes, initial


async def run_scheduler(
    nodes: list[dict[str, Any]], initial: dict[str, Any]
) -> tuple[list[ChainEvent], ChainResponse]:
    request = ChainRequest(
        id="req-p", nodes=[ChainNode(**n) for n in nodes], entry_node="n0", initial_input=initial
    )
    try:
        plan = validate_chain(
            request, FakeCatalog(tools=TOOLS, skills=()), SessionLimits(Limits()),
            granted=frozenset({"chains"}),
        )
    except ChainInvalid as exc:  # the generator only makes valid chains
        raise AssertionError(f"generated chain refused: {exc.details['errors']}") from None
    sent: list[Message] = []
    runner = ChainRunner(
        plan, executors={"tool": scheduler_tool}, limits=Limits(), emit=sent.append
    )
    with anyio.fail_after(5):
        await runner.run_to_response(time.monotonic())
    assert sent and isinstance(sent[-1], ChainResponse), "the chain/resp comes last"
    events = [m for m in sent[:-1] if isinstance(m, ChainEvent)]
    assert len(events) == len(sent) - 1, "only events come before the response"
    return events, sent[-1]


def phases(events: list[ChainEvent]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {p: set() for p in ("start", "done", "error", "skip")}
    for e in events:
        found[e.phase].add(e.node_id)
    return found


def declared(ids: set[str], templates: set[str]) -> set[str]:
    return {i for i in ids if "[" not in i and i not in templates}


def items_of(ids: set[str], maps_templates: dict[str, str], skip_maps: set[str]) -> set[str]:
    hidden = {maps_templates[m] for m in skip_maps}
    return {i for i in ids if "[" in i and i.split("[")[0] not in hidden}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains())
def test_scheduler_matches_the_reference_interpreter(
    chain: tuple[list[dict[str, Any]], dict[str, Any]],
) -> None:
    nodes, initial = chain
    events, resp = anyio.run(run_scheduler, nodes, initial)
    trace = [(e.seq, e.node_id, e.phase) for e in events]
    check_event_stream(events, "req-p")
    got = phases(events)
    templates = {n["map_node"]: n["node_id"] for n in nodes if n["kind"] == "map"}
    map_template = {m: t for t, m in templates.items()}
    template_ids = set(templates)

    # what holds whatever the order of parallel nodes
    started = declared(got["start"], template_ids)
    assert resp.nodes_run == len(started), "nodes_run counts declared nodes that started"
    assert set(resp.outputs) == declared(got["done"], template_ids), "outputs = done nodes"
    for e in events:
        if e.phase == "done" and "[" not in e.node_id:
            assert resp.outputs[e.node_id] == e.output, e.node_id
    variant: RefResult = interpret(nodes, initial, reference_tool, stop_on_abort=False)
    assert resp.final_output == final_output(variant.terminals, resp.outputs)

    if variant.abort_failures:
        # an abort ends the run: compare what cannot depend on which node went first
        assert not resp.success
        assert resp.error is not None and resp.error.code == "chain_node_error"
        assert resp.error.node_id in variant.abort_failures
        assert started <= set(variant.started)
        for nid, output in resp.outputs.items():
            assert variant.outputs.get(nid) == output, f"{nid} output differs"
        assert declared(got["skip"], template_ids) <= variant.phases["skip"]
        aborting = [e for e in events if e.node_id == resp.error.node_id and e.phase == "error"]
        assert len(aborting) == 1
        later_starts = [e.node_id for e in events if e.seq > aborting[0].seq and e.phase == "start"]
        assert later_starts == [], f"§5 abort: nothing starts after the aborting failure: {trace}"
        return

    ref = interpret(nodes, initial, reference_tool)
    assert not ref.aborted
    assert resp.success == ref.success
    assert resp.outputs == ref.outputs, f"outputs differ from the reference; events: {trace}"
    assert resp.final_output == ref.final_output
    assert resp.nodes_run == ref.nodes_run
    if ref.success:
        assert resp.error is None
    else:
        assert resp.error is not None and resp.error.code == "chain_node_error"
        assert resp.error.node_id in ref.error_nodes
    for phase in ("start", "done", "error", "skip"):
        assert declared(got[phase], template_ids) == declared(ref.phases[phase], template_ids), (
            f"{phase} nodes differ; events: {trace}"
        )
        hidden = ref.template_aborted_maps
        assert items_of(got[phase], map_template, hidden) == items_of(
            ref.phases[phase], map_template, hidden
        ), f"{phase} items differ; events: {trace}"
