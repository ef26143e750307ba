"""One node lifecycle: a declared node and a map item go through the same attempt.

Source: PROTOCOL.md §5 (start, then exactly one done/error; map items' events), §6
(output ceilings). Every wait is bounded; tools are deterministic fakes.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from typing import Any

import anyio
import pytest

from a2e_host.chains.interpreter import ContextView
from a2e_host.chains.messages import ChainEvent, ChainNode, ChainRequest, ChainResponse
from a2e_host.chains.nodes import NodeContext
from a2e_host.chains.scheduler import KIND_RUNNERS, ChainRunner, EndReason
from a2e_host.chains.validation import ChainPlan, PlanNode, validate_chain
from a2e_host.exceptions import NodeError
from a2e_host.limits import Limits, SessionLimits
from a2e_host.messages import Message

WAIT = 5.0  # seconds: the bound on every wait that should end at once


class _Tools:
    def tool_names(self) -> Collection[str]:
        return {"act"}

    def skill_names(self) -> Collection[str]:
        return set()

    def check_proc(self, node: ChainNode) -> str | None:
        return None


def plan_of(nodes: list[dict[str, Any]], **fields: Any) -> ChainPlan:
    request = ChainRequest(
        id="r", nodes=[ChainNode(**{"kind": "tool", "name": "act", **n}) for n in nodes],
        entry_node=nodes[0]["node_id"], **fields,
    )
    return validate_chain(request, _Tools(), SessionLimits(Limits()), granted=frozenset())


async def run(runner: ChainRunner, sent: list[Message]) -> tuple[list[ChainEvent], ChainResponse]:
    with anyio.fail_after(WAIT):
        response = await runner.run_to_response(time.monotonic())
    assert sent[-1] is response
    return [m for m in sent if isinstance(m, ChainEvent)], response


def runner_of(plan: ChainPlan, tool: Any, sent: list[Message], **limits: Any) -> ChainRunner:
    return ChainRunner(plan, executors={"tool": tool}, limits=Limits(**limits), emit=sent.append)


# What a tool does → the error its node (or item) reports, with {id} for its display id.
FAILURES: list[tuple[str, Any, str]] = [
    ("raises NodeError", NodeError("no such file"), "no such file"),
    ("raises ValueError", ValueError("bad value"), "ValueError: bad value"),
    ("returns NaN", float("nan"),
     "node {id} returned a non-finite number (NaN or Infinity), which JSON cannot carry"),
    ("returns a non-JSON object", object(), "node {id} returned output that is not JSON: "),
    ("returns too much", "x" * 200, "node {id} output is 202 bytes, over max_output_bytes 100"),
]


@pytest.mark.parametrize(("does", "result", "message"), FAILURES, ids=[f[0] for f in FAILURES])
@pytest.mark.asyncio
async def test_a_node_and_a_map_item_fail_the_same_way_for_the_same_tool_failure(
    does: str, result: Any, message: str
) -> None:
    async def tool(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        if isinstance(result, Exception):
            raise result
        return result

    errors: dict[str, str] = {}
    for shown, nodes in [
        ("x", [{"node_id": "x", "on_error": "skip"}]),
        ("t[0]", [{"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t",
                   "name": ""},
                  {"node_id": "t", "on_error": "skip"}]),
    ]:
        sent: list[Message] = []
        plan = plan_of(nodes, initial_input={"xs": [1]})
        events, response = await run(runner_of(plan, tool, sent, max_output_bytes=100), sent)
        phases = [(e.node_id, e.phase) for e in events if e.node_id == shown]
        assert phases == [(shown, "start"), (shown, "error")], events
        errors[shown] = next(e.error for e in events if e.node_id == shown and e.phase == "error")
        assert response.success, response.error  # skipped: handled
    node_msg = errors["x"].replace("'x'", "{id}")
    item_msg = errors["t[0]"].replace("'t[0]'", "{id}")
    assert node_msg == item_msg, errors
    assert node_msg.startswith(message), (node_msg, message)


@pytest.mark.asyncio
async def test_a_kind_runner_from_the_table_runs_inside_the_one_lifecycle() -> None:
    """Swapping the ``tool`` entry of the kind table changes what runs; the lifecycle
    around it (events, output checks, node counting) is the same for nodes and items."""
    ran: list[str] = []

    async def fake(
        run: ChainRunner, shown: str, pnode: PlanNode, context: ContextView
    ) -> tuple[Any, None]:
        ran.append(shown)
        return (float("inf") if shown == "t[1]" else {"by": shown}), None

    async def unused(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        raise AssertionError("the kind table's runner replaces the executor")

    sent: list[Message] = []
    plan = plan_of(
        [{"node_id": "a", "next_node": "m"},
         {"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t", "name": ""},
         {"node_id": "t", "on_error": "skip"}],
        initial_input={"xs": [0, 1, 2]},
    )
    runner = runner_of(plan, unused, sent, max_map_concurrency=1)
    runner.kind_runners = {**KIND_RUNNERS, "tool": fake}
    events, response = await run(runner, sent)
    assert ran == ["a", "t[0]", "t[1]", "t[2]"]
    assert [(e.node_id, e.phase) for e in events] == [
        ("a", "start"), ("a", "done"), ("m", "start"),
        ("t[0]", "start"), ("t[0]", "done"),
        ("t[1]", "start"), ("t[1]", "error"),
        ("t[2]", "start"), ("t[2]", "done"),
        ("m", "done"),
    ]
    assert "non-finite" in events[6].error
    assert response.success and response.outputs == {
        "a": {"by": "a"}, "m": [{"by": "t[0]"}, None, {"by": "t[2]"}]
    }
    assert runner.budget.request.nodes == 5  # a, m and three items
    assert runner.end is EndReason.DONE


@pytest.mark.asyncio
async def test_the_run_s_end_reason_is_an_enum_value() -> None:
    async def tool(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        if ctx.node_id == "bad":
            raise NodeError("bad broke")
        return {}

    sent: list[Message] = []
    aborted = runner_of(plan_of([{"node_id": "bad", "next_node": "b"}, {"node_id": "b"}]),
                        tool, sent)
    _, response = await run(aborted, sent)
    assert aborted.end is EndReason.ABORT and response.error is not None
    assert (response.error.code, response.error.node_id) == ("chain_node_error", "bad")

    sent = []
    cancelled = runner_of(plan_of([{"node_id": "a"}]), tool, sent)
    cancelled.cancel()
    events, response = await run(cancelled, sent)
    assert cancelled.end is EndReason.CANCELLED and events == []
    assert response.error is not None and response.error.code == "cancelled"
