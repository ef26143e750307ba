"""More scheduler behaviours: untaken branches are never evaluated, tasks stay bounded by
the concurrency limits, and a finished chain's state is freed."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref
from typing import Any

import anyio
import pytest

from a2e_host.chains.messages import ChainNode
from a2e_host.chains.nodes import NodeContext
from a2e_host.chains.scheduler import ChainRunner
from a2e_host.limits import Limits
from a2e_host.messages import Message
from tests.support.chains import echo_tool, plan_of, run_plan


@pytest.mark.asyncio
async def test_the_untaken_side_and_its_descendants_are_never_evaluated() -> None:
    # every expression on the untaken side would fail the node if it were evaluated
    boom = "length(input.n)"  # n is a number: length() raises
    plan = plan_of(
        [
            {"node_id": "route", "kind": "branch", "condition": "input.go",
             "true_node": "yes", "false_node": "no"},
            {"node_id": "yes", "input": {"v": 1}},
            {"node_id": "no", "input_map": {"x": boom}, "next_node": "after_no"},
            {"node_id": "after_no", "kind": "branch", "condition": boom, "true_node": "deep"},
            {"node_id": "deep", "kind": "map", "items_path": boom, "map_node": "t"},
            {"node_id": "t", "input_map": {"x": boom}},
        ],
        initial_input={"go": True, "n": 5},
    )
    run = await run_plan(plan)
    assert run.response.success is True
    assert run.pairs == [
        ("route", "start"), ("route", "done"),
        ("no", "skip"), ("after_no", "skip"), ("deep", "skip"),
        ("yes", "start"), ("yes", "done"),
    ]


@pytest.mark.asyncio
async def test_tasks_alive_are_bounded_by_the_concurrency_limits_not_the_items() -> None:
    items = list(range(5000))
    plan = plan_of(
        [
            {"node_id": "m", "kind": "map", "items_path": "input.items", "map_node": "t"},
            {"node_id": "t", "input_map": {"x": "item"}},
        ],
        initial_input={"items": items},
    )
    most = 0

    async def yielding_echo(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        nonlocal most
        most = max(most, len(asyncio.all_tasks()))
        await anyio.lowlevel.checkpoint()  # let every item worker get going
        return args["x"]

    before = len(asyncio.all_tasks())
    # 5,000 items are seconds of CPU on a busy 2-core machine: more than the 5 s a
    # chain that should end at once gets
    run = await run_plan(plan, yielding_echo, limits=Limits(max_map_concurrency=16), wait=60)
    assert run.response.outputs["m"] == items
    # the chain's own tasks (driver, a worker) plus at most 16 item workers
    assert most - before <= 16 + 3, f"{most - before} tasks alive for a 5,000-item map"


@pytest.mark.asyncio
async def test_a_finished_chain_holds_no_state() -> None:
    plan = plan_of([{"node_id": "a", "input": {"v": 1}, "next_node": "b"},
                    {"node_id": "b", "input_map": {"v": "a.output.v"}}])
    sent: list[Message] = []
    runner = ChainRunner(plan, executors={"tool": echo_tool}, limits=Limits(), emit=sent.append)
    with anyio.fail_after(5):
        await runner.run_to_response(time.monotonic())
    ref = weakref.ref(runner)
    del runner
    gc.collect()
    assert ref() is None, "the runner (and its context, outputs and tasks) outlived its chain"
    assert sent[-1].TYPE == "chain/resp"
