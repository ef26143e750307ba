"""Expression evaluation in the scheduler: budgets fail the node as ``chain_limit``, long
evaluations leave the event loop and stop when their chain ends, and the root is the whole
context (issue 12, items 1 and 5; issue 13, items 2 and 6; PROTOCOL.md §3, §6)."""

from __future__ import annotations

import threading
import time
from typing import Any

import anyio
import anyio.to_thread
import pytest

from a2e_host.chains import expressions
from a2e_host.chains.interpreter import EvaluationCancelled
from a2e_host.chains.messages import ChainEvent, ChainResponse
from a2e_host.chains.scheduler import ChainRunner
from a2e_host.limits import Limits, SessionLimits
from a2e_host.messages import Message
from tests.support.chains import WAIT, Run, check_stream, echo_tool, plan_of

DOUBLINGS = "|".join(["[@,@]"] * 40)
LONG_FILTER = "length(input.items[?to_string(@)=='x'])"


async def run_with(plan: Any, limits: SessionLimits | Limits, during: Any = None) -> Run:
    sent: list[Message] = []

    def emit(message: Message) -> None:
        sent.append(message)
        if during is not None and isinstance(message, ChainEvent):
            during.seen(message)

    runner = ChainRunner(plan, executors={"tool": echo_tool}, limits=limits, emit=emit)
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            if during is not None:
                tg.start_soon(during.run, runner)
            await runner.run_to_response(time.monotonic())
    run = Run(sent, time.monotonic())
    check_stream(run)
    return run


@pytest.mark.asyncio
async def test_a_value_bomb_fails_its_node_as_chain_limit_naming_the_ceiling() -> None:
    plan = plan_of([{"node_id": "x", "input_map": {"v": DOUBLINGS}}])
    run = await run_with(plan, SessionLimits(Limits()))
    assert run.pairs == [("x", "start"), ("x", "error")]
    error = run.response.error
    assert error is not None and (error.code, error.node_id) == ("chain_limit", "x")
    details = error.details
    assert {k: details[k] for k in ("ceiling", "scope", "limit", "field")} == {
        "ceiling": "max_expression_bytes", "scope": "host", "limit": 8 * 1024 * 1024,
        "field": "input_map.v"}
    assert details["requested"] > 8 * 1024 * 1024
    message = error.message
    assert "node 'x' field 'input_map.v'" in message and "max_expression_bytes" in message
    assert "8388608 bytes at host scope" in message and "A2E_MAX_EXPRESSION_BYTES" in message


@pytest.mark.asyncio
async def test_a_session_lowered_step_ceiling_is_named_with_its_scope() -> None:
    plan = plan_of(
        [{"node_id": "x", "input_map": {"v": "input.xs[?@ > `1`]"}}],
        initial_input={"xs": list(range(1_000))},
    )
    run = await run_with(plan, SessionLimits(Limits(), {"max_expression_steps": 100}))
    error = run.response.error
    assert error is not None and error.code == "chain_limit"
    assert {k: error.details[k] for k in ("ceiling", "scope", "limit", "requested")} == {
        "ceiling": "max_expression_steps", "scope": "session", "limit": 100, "requested": 101}
    assert "handshake" in error.message


@pytest.mark.asyncio
async def test_on_error_skip_applies_to_an_expression_over_budget() -> None:
    plan = plan_of([
        {"node_id": "x", "input_map": {"v": DOUBLINGS}, "on_error": "skip", "next_node": "y"},
        {"node_id": "y", "input_map": {"after": "x.status"}},
    ])
    run = await run_with(plan, Limits())
    assert run.response.success, run.response.error
    assert run.response.outputs["y"] == {"after": "error"}


@pytest.mark.asyncio
async def test_a_map_item_over_budget_fails_the_map_naming_the_ceiling() -> None:
    plan = plan_of(
        [{"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t"},
         {"node_id": "t", "input_map": {"v": "[item, item] | [@, @] | [@, @]"}}],
        initial_input={"xs": ["a", "b" * 100]},
    )
    run = await run_with(plan, Limits(max_expression_bytes=500))
    error = run.response.error
    assert error is not None and error.node_id == "m"
    assert "max_expression_bytes" in error.message and "item 1" in error.message
    assert error.code == "chain_limit"
    assert error.details["ceiling"] == "max_expression_bytes"
    assert error.details["index"] == 1 and error.details["limit"] == 500


class CancelOnceOffLoop:
    """Cancels the run once the evaluation is running in its worker thread: possible only
    if the loop is free. Waits for that moment by an event, never by a guessed sleep."""

    def __init__(self) -> None:
        self.in_thread = threading.Event()

    def seen(self, event: ChainEvent) -> None:
        pass

    async def run(self, runner: ChainRunner) -> None:
        assert await anyio.to_thread.run_sync(self.in_thread.wait, 60.0)
        runner.cancel()


@pytest.mark.asyncio
async def test_a_long_evaluation_leaves_the_loop_and_stops_when_its_chain_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    outcomes: list[BaseException | None] = []
    finished = threading.Event()
    evaluate = expressions.evaluate
    canceller = CancelOnceOffLoop()

    def watched(parsed: Any, root: Any, budget: Any) -> Any:
        off_loop = threading.current_thread() is not threading.main_thread()
        if off_loop:
            canceller.in_thread.set()
        try:
            result = evaluate(parsed, root, budget)
        except BaseException as exc:
            if off_loop:
                outcomes.append(exc)
                finished.set()
            raise
        if off_loop:
            outcomes.append(None)
            finished.set()
        return result

    monkeypatch.setattr(expressions, "evaluate", watched)
    plan = plan_of([{"node_id": "x", "input_map": {"v": LONG_FILTER}}],
                   initial_input={"items": list(range(2_000_000))})
    run = await run_with(plan, Limits(max_expression_steps=10**9), during=canceller)
    assert run.response.error is not None
    assert run.response.error.code == "cancelled", run.response.error
    # the abandoned evaluation notices its cancel flag and stops soon after
    assert await anyio.to_thread.run_sync(finished.wait, 60.0)
    assert len(outcomes) == 1 and isinstance(outcomes[0], EvaluationCancelled), outcomes


@pytest.mark.asyncio
async def test_a_short_evaluation_stays_on_the_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[str] = []
    evaluate = expressions.evaluate

    def watched(parsed: Any, root: Any, budget: Any) -> Any:
        threads.append(threading.current_thread().name)
        return evaluate(parsed, root, budget)

    monkeypatch.setattr(expressions, "evaluate", watched)
    plan = plan_of([{"node_id": "x", "input_map": {"v": "input.xs[?@ > `1`]"}}],
                   initial_input={"xs": [1, 2, 3]})
    run = await run_with(plan, Limits())
    assert run.response.outputs["x"] == {"v": [2, 3]}
    assert threads == [threading.current_thread().name]


@pytest.mark.asyncio
async def test_a_long_evaluation_within_budget_gives_its_result_from_a_thread() -> None:
    plan = plan_of([{"node_id": "x", "input_map": {"v": "length(input.xs[?@ > `10`])"}}],
                   initial_input={"xs": list(range(20_000))})
    run = await run_with(plan, Limits())
    assert run.response.outputs["x"] == {"v": 19_989}


# ── the root (issue 13, item 2) ────────────────────────────────────────────────


@pytest.mark.asyncio
async def test_dollar_and_at_give_the_whole_context_as_a_json_object() -> None:
    plan = plan_of(
        [
            {"node_id": "a", "input": {"k": 1}, "next_node": "b"},
            {"node_id": "b", "input_map": {
                "whole": "$", "at": "@", "keys": "keys(@)", "n": "length(@)",
                "merged": "merge(@, `{}`)", "kind": "type(@)", "a_status": "$.a.status"}},
        ],
        initial_input={"q": 2},
    )
    run = await run_with(plan, Limits())
    assert run.response.success, run.response.error
    whole = {"input": {"q": 2}, "a": {"output": {"k": 1}, "status": "done"},
             "output": {"k": 1}}
    assert run.response.outputs["b"] == {
        "whole": whole, "at": whole, "keys": ["input", "a", "output"], "n": 3,
        "merged": whole, "kind": "object", "a_status": "done"}
    assert isinstance(run.sent[-1], ChainResponse)


@pytest.mark.asyncio
async def test_a_map_item_sees_item_and_index_in_the_whole_context() -> None:
    plan = plan_of(
        [{"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t"},
         {"node_id": "t", "input_map": {"keys": "sort(keys(@))"}}],
        initial_input={"xs": [7]},
    )
    run = await run_with(plan, Limits())
    assert run.response.outputs["m"] == [
        {"keys": ["_item", "index", "input", "item", "output"]}]


# ── ordering comparisons (issue 13, item 6) ────────────────────────────────────


@pytest.mark.asyncio
async def test_ordering_a_number_against_a_string_is_null_not_a_node_error() -> None:
    plan = plan_of(
        [{"node_id": "c", "kind": "branch", "condition": "input.n > input.s",
          "true_node": "t", "false_node": "f"},
         {"node_id": "t", "input": {"side": "t"}},
         {"node_id": "f", "input": {"side": "f"},
          "input_map": {"lt": "input.n < input.s", "kept": "input.rows[?age > `30`].name"}}],
        initial_input={"n": 5, "s": "7",
                       "rows": [{"name": "a", "age": 45}, {"name": "b", "age": "50"}]},
    )
    run = await run_with(plan, Limits())
    assert run.response.success, run.response.error
    assert run.response.outputs["c"] == {"condition": False, "taken": "f"}
    assert run.response.outputs["f"] == {"side": "f", "lt": None, "kept": ["a"]}


@pytest.mark.asyncio
async def test_an_arithmetic_overflow_in_an_expression_is_the_expressions_clean_error() -> None:
    """avg() of a 401-digit integer (the decoder accepts it) overflows a float."""
    plan = plan_of([{"node_id": "a", "input": {"v": [10**400]}, "next_node": "b"},
                    {"node_id": "b", "input_map": {"x": "avg(a.output.v)"}}])
    run = await run_with(plan, Limits())
    error = run.response.error
    assert error is not None and error.code == "chain_node_error"
    assert "field 'input_map.x'" in error.message and "avg(a.output.v)" in error.message
    assert error.details == {"field": "input_map.x", "expression": "avg(a.output.v)"}
