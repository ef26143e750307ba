"""Skills that fan out share the request's concurrency (PROTOCOL.md §6 ``max_concurrency``):
once the spare slots are taken the expansion runs depth-first, so the nodes in flight —
and the sub-chain runs alive — stay bounded, whatever the breadth (issue 12.7)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from a2e_host.chains.messages import ChainEvent, ChainResponse
from a2e_host.client import spawn_stdio
from tests.support.process import CLI, STARTUP

LEVELS, COPIES = 6, 4  # 1,365 skill nodes and 1,024 leaves below one top node


def write_fanout(skills: Path) -> None:
    for level in range(LEVELS):
        if level == LEVELS - 1:
            nodes: list[dict[str, Any]] = [
                {"node_id": "leaf", "kind": "tool", "name": "echo", "input": {"leaf": level}}
            ]
        else:
            nodes = [{"node_id": f"c{k}", "kind": "skill", "name": f"s{level + 1}"}
                     for k in range(COPIES)]
        skill = {"name": f"s{level}", "description": f"level {level}",
                 "entry_node": nodes[0]["node_id"], "nodes": nodes}
        (skills / f"s{level}.json").write_text(json.dumps(skill), encoding="utf-8")


def peak_in_flight(events: list[ChainEvent]) -> int:
    """The most nodes (any depth) that had started and not ended at one point."""
    live = peak = 0
    for event in events:
        if event.phase == "start":
            live += 1
            peak = max(peak, live)
        elif event.phase in ("done", "error"):
            live -= 1
    return peak


@pytest.mark.asyncio
async def test_a_skill_fan_out_runs_within_the_requests_concurrency(tmp_path: Path) -> None:
    write_fanout(tmp_path)
    argv = [*CLI, "stdio", "--tools", "conformance", "--skills", str(tmp_path)]
    with anyio.fail_after(120):
        async with spawn_stdio(argv, stderr="capture", agent_caps=("chains", "skill"),
                               limits={"max_concurrency": 4}, handshake_timeout=STARTUP) as client:
            messages = [m async for m in client.run_chain(
                [{"node_id": "top", "kind": "skill", "name": "s0"}], "top")]
    response = messages[-1]
    assert isinstance(response, ChainResponse) and response.success, response
    events = [m for m in messages if isinstance(m, ChainEvent)]
    leaves = [e for e in events if e.node_id.endswith("/leaf") and e.phase == "done"]
    assert len(leaves) == COPIES ** (LEVELS - 1)
    # 4 request-wide workers, each at the head of a depth-first path of at most
    # LEVELS + 1 runs that each hold one node in flight; unbounded, all 2,390 would be
    peak = peak_in_flight(events)
    assert peak <= 4 * (LEVELS + 1), peak


@pytest.mark.asyncio
async def test_a_sub_chain_gets_back_the_slots_of_workers_idle_elsewhere_in_the_request() -> None:
    """Workers of the top run that went idle before a skill started hold spare slots;
    the sub-chain must still get max_concurrency nodes in flight."""
    from a2e_host.chains.messages import ChainNode, ChainRequest
    from a2e_host.chains.scheduler import ChainRunner
    from a2e_host.chains.validation import validate_chain
    from a2e_host.limits import Limits, SessionLimits

    class Catalog:
        def tool_names(self) -> set[str]:
            return {"quick", "wide"}

        def skill_names(self) -> set[str]:
            return {"sk"}

        def check_proc(self, node: ChainNode) -> None:
            return None

    def plan_of(nodes: list[ChainNode], entry: str, name: str = "") -> Any:
        request = ChainRequest(id="r", nodes=nodes, entry_node=entry, chain_id=name or "c")
        return validate_chain(request, Catalog(), SessionLimits(Limits()),
                              granted=frozenset({"chains", "skill"}))

    live = peak = 0
    all_in = anyio.Event()

    async def tool(node: ChainNode, args: dict[str, Any], ctx: Any) -> Any:
        nonlocal live, peak
        if node.node_id == "q0":
            # the other roots are done and their workers parked before the skill starts
            await anyio.wait_all_tasks_blocked()
        if node.name == "wide":
            live += 1
            peak = max(peak, live)
            if live == 4:
                all_in.set()
            with anyio.move_on_after(2):
                await all_in.wait()
            live -= 1
        return {}

    async def skill(node: ChainNode, args: dict[str, Any], ctx: Any) -> Any:
        inner = [ChainNode(node_id=f"p{i}", kind="tool", name="wide") for i in range(4)]
        return await ctx.run_subchain("sk", inner, "p0", {})

    top = [ChainNode(node_id="q0", kind="tool", name="quick")]
    top += [ChainNode(node_id=f"q{i}", kind="tool", name="quick") for i in (1, 2, 3)]
    top.append(ChainNode(node_id="k", kind="skill", name="sk", input_map={"a": "q0.output"}))
    runner = ChainRunner(
        plan_of(top, "q0"), executors={"tool": tool, "skill": skill},
        limits=Limits(max_concurrency=4), emit=lambda message: None,
        subchain_planner=lambda name, nodes, entry, depth: plan_of(nodes, entry, name),
    )
    with anyio.fail_after(30):
        response = await runner.run_to_response(0.0)
    assert response.success, response.error
    assert peak == 4, peak  # before: the top run's idle workers kept two of the slots
    assert runner.budget.request.spare_workers == 3 and not runner.budget.request.idle_borrowed
