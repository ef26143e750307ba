"""Request budgets in the scheduler (PROTOCOL.md §6): ``max_output_bytes`` without encoding
a gigantic value, ``max_chain_output_bytes`` and ``max_total_nodes`` counted as a request
runs; and the run-level pieces of the chains plugin's guarantees (cancelled before it
starts, leaving the in-flight table before the response, output opt-ins)."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from a2e_host.chains.messages import ChainEvent, ChainNode, ChainResponse
from a2e_host.chains.nodes import NodeContext
from a2e_host.chains.scheduler import ChainRunner
from a2e_host.limits import Limits
from a2e_host.messages import Message
from tests.support.chains import WAIT, Run, plan_of, run_plan

KIB = 1024


async def sized_tool(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
    """``echo`` with ``{"n": N}`` returns ``"x" * N`` (N + 2 bytes encoded); ``fail``
    raises; ``bomb`` returns one 1 MiB string shared a million times (~1 TB as JSON)."""
    if node.name == "fail":
        raise ValueError("boom")
    if node.name == "probe":
        return [("x" * 2**20)] * 10**6
    return "x" * int(args.get("n", 0))


def fan_out(count: int, size: int, **extra: Any) -> list[dict[str, Any]]:
    """A root and ``count`` independent nodes after it, each returning ``size`` bytes."""
    nodes: list[dict[str, Any]] = [{"node_id": "root", "input": {"n": 1}}]
    for i in range(count):
        nodes.append({"node_id": f"n{i}", "input": {"n": size - 2},
                      "input_map": {"after": "root.output"}, **extra})
    return nodes


def limit_details(run: Run) -> dict[str, Any]:
    error = run.response.error
    assert error is not None and error.code == "chain_limit", run.response
    return {k: error.details[k] for k in ("ceiling", "scope", "limit", "requested")}


# ── max_output_bytes without encoding ───────────────────────────────────────────


@pytest.mark.asyncio
async def test_an_output_sharing_one_string_a_million_times_is_refused_without_encoding_it() -> (
    None
):
    """issue 12.1: a tool returning ``[big] * 10**6`` is refused by max_output_bytes at
    once; encoding it first would build ~1 TB."""
    t = time.perf_counter()
    run = await run_plan(plan_of([{"node_id": "a", "name": "probe"}]), sized_tool)
    elapsed = time.perf_counter() - t
    details = limit_details(run)
    assert details["ceiling"] == "max_output_bytes" and details["limit"] == 8 * 2**20
    assert 8 * 2**20 < details["requested"] < 16 * 2**20, details
    assert run.response.error is not None
    assert "at least" in run.response.error.message, run.response.error
    assert run.pairs == [("a", "start"), ("a", "error")]
    assert elapsed < 3.0, f"refusing took {elapsed:.1f} s"


@pytest.mark.asyncio
async def test_a_large_output_under_the_cap_is_measured_exactly_and_kept() -> None:
    """A list of 5,000 strings is past the quick path: counted in slices, exactly."""
    async def many(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        return [f"item-{i}" for i in range(5000)]

    run = await run_plan(plan_of([{"node_id": "a"}]), many,
                         limits=Limits(max_output_bytes=60_000))
    assert run.response.success and len(run.response.outputs["a"]) == 5000
    over = await run_plan(plan_of([{"node_id": "a"}]), many,
                          limits=Limits(max_output_bytes=40_000))
    details = limit_details(over)
    assert (details["ceiling"], details["scope"]) == ("max_output_bytes", "host")
    assert 40_000 < details["requested"] <= len(str([f"item-{i}" for i in range(5000)]))


# ── max_chain_output_bytes ──────────────────────────────────────────────────────


@pytest.mark.asyncio
async def test_outputs_a_request_keeps_past_max_chain_output_bytes_fail_the_node_that_crosses() -> (
    None
):
    """issue 12.6: 20 nodes of 10 KiB under a 64 KiB chain budget: the node that would
    bring the kept outputs over it fails with chain_limit naming the ceiling."""
    limits = Limits(max_chain_output_bytes=64 * KIB, max_concurrency=1)
    run = await run_plan(plan_of(fan_out(20, 10 * KIB)), sized_tool, limits=limits)
    details = limit_details(run)
    assert details == {"ceiling": "max_chain_output_bytes", "scope": "host",
                       "limit": 64 * KIB, "requested": 3 + 7 * 10 * KIB}, details
    assert run.response.error is not None and run.response.error.node_id == "n6"
    done = [e.node_id for e in run.events if e.phase == "done"]
    assert done == ["root", *(f"n{i}" for i in range(6))], done


@pytest.mark.asyncio
async def test_on_error_skip_applies_to_a_node_refused_by_the_chain_output_budget() -> None:
    limits = Limits(max_chain_output_bytes=64 * KIB, max_concurrency=1)
    run = await run_plan(plan_of(fan_out(10, 10 * KIB, on_error="skip")), sized_tool,
                         limits=limits)
    assert run.response.success is True
    assert sorted(run.response.outputs) == ["n0", "n1", "n2", "n3", "n4", "n5", "root"]
    errors = [e for e in run.events if e.phase == "error"]
    assert [e.node_id for e in errors] == ["n6", "n7", "n8", "n9"]
    assert all("max_chain_output_bytes" in e.error for e in errors), errors


@pytest.mark.asyncio
async def test_map_items_over_the_chain_output_budget_fail_the_map_even_under_skip() -> None:
    """The budget does not come back, so the map fails at the item that overflows, with
    chain_limit, details naming the ceiling and the item index."""
    nodes = [
        {"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t"},
        {"node_id": "t", "input_map": {"n": "item"}, "on_error": "skip"},
    ]
    limits = Limits(max_chain_output_bytes=50 * KIB, max_map_concurrency=1)
    run = await run_plan(plan_of(nodes, initial_input={"xs": [10 * KIB] * 30}), sized_tool,
                         limits=limits)
    error = run.response.error
    assert error is not None and (error.code, error.node_id) == ("chain_limit", "m")
    assert error.details["ceiling"] == "max_chain_output_bytes"
    assert error.details["index"] == 4, error
    started = [e for e in run.events if e.phase == "start" and e.node_id.startswith("t[")]
    assert len(started) == 5, "no item starts after the one that overflowed"


@pytest.mark.asyncio
async def test_a_map_whose_items_already_exceed_its_output_cap_fails_before_running_the_rest() -> (
    None
):
    """issue 12.6: 250 items of just under half max_output_bytes: the map's output is
    sure to be refused after the second item, so the map fails then, not after 250."""
    nodes = [
        {"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t"},
        {"node_id": "t", "input_map": {"n": "item"}},
    ]
    limits = Limits(max_output_bytes=100 * KIB, max_map_concurrency=1)
    run = await run_plan(plan_of(nodes, initial_input={"xs": [50 * KIB - 10] * 250}),
                         sized_tool, limits=limits)
    error = run.response.error
    assert error is not None and (error.code, error.node_id) == ("chain_limit", "m")
    assert error.details["ceiling"] == "max_output_bytes", error
    assert error.details["index"] == 1 and error.details["requested"] > 100 * KIB
    items = {e.node_id for e in run.events if e.node_id.startswith("t[")}
    assert items == {"t[0]", "t[1]"}, items


@pytest.mark.asyncio
async def test_a_failed_maps_item_outputs_are_given_back_to_the_chain_budget() -> None:
    """A map that fails (under skip) drops its items' outputs: nodes after it may keep
    as much again."""
    nodes = [
        {"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t",
         "on_error": "skip", "next_node": "after"},
        {"node_id": "t", "input_map": {"n": "item"}},
        {"node_id": "after", "input": {"n": 30 * KIB}},
    ]
    xs: list[Any] = [10 * KIB] * 3 + ["fail"]

    async def tool(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        if args.get("n") == "fail":
            raise ValueError("item failed")
        return await sized_tool(node, args, ctx)

    limits = Limits(max_chain_output_bytes=40 * KIB, max_map_concurrency=1)
    run = await run_plan(plan_of(nodes, initial_input={"xs": xs}), tool, limits=limits)
    assert run.response.success, run.response.error
    assert run.of("m") == ["start", "error"] and run.of("after") == ["start", "done"]


# ── max_total_nodes ─────────────────────────────────────────────────────────────


@pytest.mark.asyncio
async def test_node_executions_past_max_total_nodes_fail_the_node_that_crosses() -> None:
    limits = Limits(max_total_nodes=5, max_concurrency=1)
    run = await run_plan(plan_of(fan_out(8, 4)), sized_tool, limits=limits)
    assert limit_details(run) == {"ceiling": "max_total_nodes", "scope": "host",
                                  "limit": 5, "requested": 6}
    assert run.response.error is not None and run.response.error.node_id == "n4"
    assert run.of("n4") == ["start", "error"] and run.response.nodes_run == 6


@pytest.mark.asyncio
async def test_a_map_whose_items_would_pass_max_total_nodes_fails_before_any_item_starts() -> (
    None
):
    nodes = [
        {"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t"},
        {"node_id": "t", "input_map": {"n": "item"}},
    ]
    run = await run_plan(plan_of(nodes, initial_input={"xs": [1] * 100}), sized_tool,
                         limits=Limits(max_total_nodes=50))
    assert limit_details(run) == {"ceiling": "max_total_nodes", "scope": "host",
                                  "limit": 50, "requested": 101}
    assert run.pairs == [("m", "start"), ("m", "error")]
    ok = await run_plan(plan_of(nodes, initial_input={"xs": [1] * 49}), sized_tool,
                        limits=Limits(max_total_nodes=50))
    assert ok.response.success and len(ok.response.outputs["m"]) == 49


# ── the run's edges: cancelled before it starts, the response hook, opt-ins ─────


@pytest.mark.asyncio
async def test_a_run_cancelled_before_it_starts_answers_cancelled_with_no_event() -> None:
    sent: list[Message] = []
    runner = ChainRunner(plan_of(fan_out(3, 4)), executors={"tool": sized_tool},
                         limits=Limits(), emit=sent.append)
    runner.cancel()
    with anyio.fail_after(WAIT):
        response = await runner.run_to_response(time.monotonic())
    assert sent == [response]
    assert response.error is not None and response.error.code == "cancelled"
    assert response.nodes_run == 0 and response.outputs == {}


@pytest.mark.asyncio
async def test_before_response_runs_before_the_response_is_emitted() -> None:
    order: list[str] = []

    def emit(message: Message) -> None:
        order.append(message.TYPE)

    runner = ChainRunner(plan_of([{"node_id": "a"}]), executors={"tool": sized_tool},
                         limits=Limits(), emit=emit)
    with anyio.fail_after(WAIT):
        await runner.run_to_response(
            time.monotonic(), before_response=lambda: order.append("left")
        )
    assert order == ["chain/event", "chain/event", "left", "chain/resp"]


@pytest.mark.asyncio
async def test_include_outputs_false_sends_outputs_empty_and_still_the_final_output() -> None:
    nodes = [{"node_id": "a", "input": {"n": 3}, "next_node": "b"},
             {"node_id": "b", "input": {"n": 5}}]
    run = await run_plan(plan_of(nodes, include_outputs=False), sized_tool)
    assert (run.response.outputs, run.response.final_output) == ({}, "xxxxx")
    assert run.event("b", "done").output == "xxxxx", "events keep their outputs"


@pytest.mark.asyncio
async def test_event_outputs_false_sends_done_events_with_null_output() -> None:
    nodes = [
        {"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t"},
        {"node_id": "t", "input_map": {"n": "item"}},
    ]
    run = await run_plan(plan_of(nodes, initial_input={"xs": [1, 2]}, event_outputs=False),
                         sized_tool)
    done = [e for e in run.events if e.phase == "done"]
    assert sorted(e.node_id for e in done) == ["m", "t[0]", "t[1]"]
    assert all(isinstance(e, ChainEvent) and e.output is None for e in done)
    assert isinstance(run.response, ChainResponse)
    assert run.response.outputs == {"m": ["x", "xx"]} and run.response.final_output == ["x", "xx"]
