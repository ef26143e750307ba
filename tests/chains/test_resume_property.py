"""For any prefix of a finished durable run's log, resuming from it and running to the end
gives what the uninterrupted run gave: the same outputs, one terminal event per node, a
gapless ``seq`` across the restart (PROTOCOL.md §5 Resume).

Chains are random DAGs of tool, branch and map nodes; some tools fail, under random
``on_error`` policies; every tool is idempotent (so a node in flight at the cut runs
again) and deterministic. Whether an abort ends the chain may depend on which parallel
node went first: then only the shape of the stream and the failure are compared.
"""

from __future__ import annotations

from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from a2e_host.chains.messages import ChainNode, ChainRequest
from a2e_host.chains.nodes import NodeContext
from a2e_host.chains.validation import ChainPlan, validate_chain
from a2e_host.exceptions import NodeError
from a2e_host.limits import Limits, SessionLimits
from tests.support.chains import FakeCatalog
from tests.support.resume import DurableLog, check_resumed_stream, run_durable

TOOLS = ("ok", "bad", "bad_odd")


async def tool(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
    await anyio.lowlevel.checkpoint()  # let parallel nodes interleave
    if node.name == "bad" or (node.name == "bad_odd" and args.get("item", 0) % 2 == 1):
        raise NodeError(f"{ctx.node_id} failed on purpose")
    return {"by": ctx.node_id, "args": args}


@st.composite
def chains(draw: st.DrawFn) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A random valid chain (node dicts) and its initial input."""
    count = draw(st.integers(2, 6))
    ids = [f"n{i}" for i in range(count)]
    initial = {"f": draw(st.booleans()), "xs": draw(st.lists(st.integers(0, 3), max_size=4))}
    nodes: list[dict[str, Any]] = []
    handlers: set[str] = set()
    for i, nid in enumerate(ids):
        earlier, later = ids[:i], ids[i + 1:]
        kind = draw(st.sampled_from(["tool", "tool", "branch", "map"]))
        if kind == "branch" and not later:
            kind = "tool"
        node: dict[str, Any] = {"node_id": nid, "kind": kind}
        if later and draw(st.booleans()):
            node["next_node"] = draw(st.sampled_from(later))
        reads = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=2)) if earlier else []
        free = [h for h in later if h not in handlers]
        policy = draw(st.sampled_from(["abort", "skip", "handler"] if free else ["abort", "skip"]))
        if policy == "handler":
            handler = draw(st.sampled_from(free))
            handlers.add(handler)
            node["on_error"] = handler
        else:
            node["on_error"] = policy
        template = None
        if kind == "tool":
            node["name"] = draw(st.sampled_from(["ok", "ok", "ok", "bad"]))
            node["input_map"] = {f"from_{r}": f"{r}.output" for r in reads}
        elif kind == "branch":
            node["condition"] = draw(st.sampled_from(
                ["input.f", "`null`", *(f"{r}.output" for r in earlier)]))
            node["true_node"] = draw(st.sampled_from(later))
            rest = [x for x in later if x != node["true_node"]]
            node["false_node"] = draw(st.sampled_from(["", *rest])) if rest else ""
        else:
            node["map_node"] = f"t{i}"
            node["items_path"] = "input.xs"
            template = {"node_id": f"t{i}", "kind": "tool",
                        "name": draw(st.sampled_from(["ok", "ok", "bad_odd"])),
                        "input_map": {"item": "item"},
                        "on_error": draw(st.sampled_from(["abort", "skip"]))}
        nodes.append(node)
        if template is not None:
            nodes.append(template)
    return nodes, initial


def plan_of(nodes: list[dict[str, Any]], initial: dict[str, Any]) -> ChainPlan:
    request = ChainRequest(id="req-p", nodes=[ChainNode(**n) for n in nodes], entry_node="n0",
                           initial_input=initial)
    return validate_chain(request, FakeCatalog(tools=TOOLS, skills=()),
                          SessionLimits(Limits()), granted=frozenset({"chains"}))


async def resume_at(plan: ChainPlan, cut: float, limits: Limits
                    ) -> tuple[DurableLog, DurableLog, int]:
    """The run, and its resumption from the first ``cut`` (0–1) of its log."""
    first = await run_durable(plan, {"tool": tool}, limits=limits)
    k = round(cut * len(first.frames))
    resumed = await run_durable(plan, {"tool": tool}, prefix=first.frames[:k], limits=limits,
                                idempotent=lambda name: True)
    return first, resumed, k


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains(), st.floats(0, 1), st.integers(1, 3), st.integers(1, 2))
def test_resuming_any_prefix_of_the_log_finishes_as_the_uninterrupted_run(
    chain: tuple[list[dict[str, Any]], dict[str, Any]], cut: float, workers: int, items: int
) -> None:
    plan = plan_of(*chain)
    limits = Limits(max_concurrency=workers, max_map_concurrency=items)
    first, resumed, k = anyio.run(resume_at, plan, cut, limits)
    events = [*first.events[:k], *resumed.events]
    check_resumed_stream(events, "req-p")
    before, after = first.response, resumed.response
    assert before is not None and after is not None
    started = {e.node_id for e in events if e.phase == "start"}
    ended = {e.node_id for e in events if e.phase in ("done", "error")}
    assert started <= ended, "every node that started ended, across the restart"
    assert after.success == before.success
    aborted = before.error is not None and any(
        plan.nodes[plan.by_id[n]].on_error == "abort" for n in [before.error.node_id]
        if n in plan.by_id)
    if aborted:
        assert after.error is not None and after.error.code == before.error.code
        return
    assert after.outputs == before.outputs
    assert after.final_output == before.final_output
    assert after.nodes_run == before.nodes_run
    assert after.error == before.error
    done = {e.node_id: e.output for e in events if e.phase == "done" and "[" not in e.node_id}
    assert done.keys() == after.outputs.keys()


async def resume_without_reruns(plan: ChainPlan, cut: float, limits: Limits
                                ) -> tuple[DurableLog, DurableLog, int, list[str]]:
    """As :func:`resume_at`, with no tool idempotent; also who the resumed run called."""
    first = await run_durable(plan, {"tool": tool}, limits=limits)
    k = round(cut * len(first.frames))
    called: list[str] = []

    async def recording(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        called.append(ctx.node_id)
        return await tool(node, args, ctx)

    resumed = await run_durable(plan, {"tool": recording}, prefix=first.frames[:k],
                                limits=limits)
    return first, resumed, k, called


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains(), st.floats(0, 1), st.integers(1, 3), st.integers(1, 2))
def test_without_idempotent_tools_nothing_that_started_before_the_restart_runs_again(
    chain: tuple[list[dict[str, Any]], dict[str, Any]], cut: float, workers: int, items: int
) -> None:
    plan = plan_of(*chain)
    limits = Limits(max_concurrency=workers, max_map_concurrency=items)
    first, resumed, k, called = anyio.run(resume_without_reruns, plan, cut, limits)
    before = first.events[:k]
    check_resumed_stream([*before, *resumed.events], "req-p")
    started_before = {e.node_id for e in before if e.phase == "start"}
    assert not started_before & set(called), "a tool that had started ran a second time"
    for e in resumed.events:
        if e.node_id in started_before and e.phase == "error" and e.kind == "status":
            assert e.data.get("resumed") is True
