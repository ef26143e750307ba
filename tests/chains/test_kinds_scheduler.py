"""The scheduler runs what the node-kind table says (issue 14, item 5): a kind added to the
table alone, with an executor for it, runs as a node and as a map's template, with no
change to the scheduler; and the scheduler's own runners are exactly the table's control
kinds (a control kind added to the table without a runner would otherwise fall through to
"no executor for kind")."""

from __future__ import annotations

import time
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from a2e_host.chains import kinds
from a2e_host.chains.kinds import NODE_KINDS, KindSpec
from a2e_host.chains.messages import ChainNode, ChainResponse
from a2e_host.chains.nodes import NodeContext
from a2e_host.chains.scheduler import KIND_RUNNERS, ChainRunner
from a2e_host.limits import Limits
from a2e_host.messages import Message
from tests.support.chains import WAIT, Run, check_stream, echo_tool, plan_of

WAIT_KIND = KindSpec("wait", shape="rounded")


@pytest.fixture
def with_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kinds, "NODE_KINDS", NODE_KINDS.with_kind(WAIT_KIND))


async def wait_executor(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
    await anyio.lowlevel.checkpoint()
    return {"waited": args.get("seconds"), "node": ctx.node_id}


async def run_with_wait(nodes: list[dict[str, Any]]) -> Run:
    plan = plan_of(nodes)
    sent: list[Message] = []
    runner = ChainRunner(plan, executors={"tool": echo_tool, "wait": wait_executor},
                         limits=Limits(), emit=sent.append)
    with anyio.fail_after(WAIT):
        await runner.run_to_response(time.monotonic())
    run = Run(sent, time.monotonic())
    check_stream(run)
    return run


@pytest.mark.asyncio
@pytest.mark.usefixtures("with_wait")
async def test_a_kind_added_to_the_table_runs_through_its_executor() -> None:
    run = await run_with_wait([
        {"node_id": "a", "input": {"x": 1}, "next_node": "pause"},
        {"node_id": "pause", "kind": "wait", "name": "", "input_map": {"seconds": "a.output.x"},
         "next_node": "b"},
        {"node_id": "b", "input_map": {"w": "pause.output.waited"}},
    ])
    assert run.pairs == [("a", "start"), ("a", "done"), ("pause", "start"), ("pause", "done"),
                         ("b", "start"), ("b", "done")]
    response = run.response
    assert isinstance(response, ChainResponse) and response.success
    assert response.outputs["pause"] == {"waited": 1, "node": "pause"}
    assert response.outputs["b"] == {"w": 1}


@pytest.mark.asyncio
@pytest.mark.usefixtures("with_wait")
async def test_a_kind_added_to_the_table_runs_as_a_map_template() -> None:
    run = await run_with_wait([
        {"node_id": "src", "input": {"items": [1, 2]}, "next_node": "m"},
        {"node_id": "m", "kind": "map", "name": "", "items_path": "src.output.items",
         "map_node": "t"},
        {"node_id": "t", "kind": "wait", "name": "", "input_map": {"seconds": "item"}},
    ])
    assert run.response.success, run.response.error
    assert run.response.outputs["m"] == [{"waited": 1, "node": "t[0]"},
                                         {"waited": 2, "node": "t[1]"}]


def test_the_schedulers_runners_are_the_tables_control_kinds() -> None:
    control = {name for name, spec in NODE_KINDS.specs.items() if not spec.executed}
    assert set(KIND_RUNNERS) == control
