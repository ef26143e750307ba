"""Durable runs resumed from a prefix of their log, in process (PROTOCOL.md §5 Resume):
what runs again, what is restored, and the events a client sees after the restart."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from a2e_host.chains.messages import ChainNode, ChainRequest
from a2e_host.chains.nodes import NodeContext
from a2e_host.chains.validation import ChainPlan, validate_chain
from a2e_host.exceptions import NodeError
from a2e_host.limits import Limits, SessionLimits
from a2e_host.store import StoredFrame
from tests.support.chains import FakeCatalog, plan_of
from tests.support.resume import DurableLog, check_resumed_stream, data_of, run_durable


class Recorder:
    """A tool that records every call: (display id, idempotency key)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def __call__(self, node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        self.calls.append((ctx.node_id, ctx.idempotency_key))
        if node.name == "fail":
            raise NodeError("boom")
        return {"by": ctx.node_id, **args}

    def ran(self) -> list[str]:
        return [shown for shown, _ in self.calls]


def cut_after(frames: list[StoredFrame], node_id: str, phase: str = "start"
              ) -> list[StoredFrame]:
    """The log as a crash right after ``node_id``'s ``phase`` event left it."""
    for i, f in enumerate(frames):
        if f.node_id == node_id and f.phase == phase:
            return frames[: i + 1]
    raise AssertionError(f"no {phase} of {node_id} in the log")


CHAIN = [{"node_id": "a", "next_node": "b", "input": {"n": 1}},
         {"node_id": "b", "next_node": "c", "input_map": {"x": "a.output.n"}},
         {"node_id": "c", "input_map": {"y": "b.output.x"}}]


async def full_run(plan: ChainPlan) -> tuple[DurableLog, Recorder]:
    tool = Recorder()
    return await run_durable(plan, {"tool": tool}), tool


@pytest.mark.asyncio
async def test_every_terminal_event_keeps_its_nodes_output_even_when_the_event_has_none(
) -> None:
    plan = plan_of(CHAIN, event_outputs=False)
    log, _ = await full_run(plan)
    done = [f for f in log.frames if f.phase == "done"]
    assert [f.node_id for f in done] == ["a", "b", "c"]
    assert all(e.output is None for e in log.events)
    assert msgspec.json.decode(done[0].output or b"") == {"by": "a", "n": 1}
    assert all(f.output is None for f in log.frames if f.phase == "start")


@pytest.mark.asyncio
async def test_a_run_without_a_checkpoint_emits_exactly_as_before() -> None:
    from tests.support.chains import run_plan

    plan = plan_of(CHAIN)
    run = await run_plan(plan, Recorder())
    durable, _ = await full_run(plan)
    assert [(e.seq, e.node_id, e.phase, e.output, e.data) for e in run.events] == [
        (e.seq, e.node_id, e.phase, e.output, e.data) for e in durable.events]


@pytest.mark.asyncio
async def test_an_in_flight_tool_not_idempotent_ends_interrupted_and_nothing_runs_twice(
) -> None:
    plan = plan_of(CHAIN)
    first, _ = await full_run(plan)
    prefix = cut_after(first.frames, "b")
    tool = Recorder()
    resumed = await run_durable(plan, {"tool": tool}, prefix=prefix)
    assert tool.calls == [], "a done node never runs again; b may not"
    events = resumed.events
    assert [(e.node_id, e.phase) for e in events] == [("b", "error")]
    assert events[0].seq == prefix[-1].seq + 1, "seq continues from the last stored"
    assert data_of(events[0]) == {"resumed": True}
    assert resumed.response is not None and resumed.response.error is not None
    assert resumed.response.error.code == "interrupted"
    assert resumed.response.error.node_id == "b"
    assert resumed.response.outputs == {"a": {"by": "a", "n": 1}}
    check_resumed_stream([*first.events[: len(prefix)], *events], "req-1")


@pytest.mark.asyncio
async def test_an_idempotent_in_flight_tool_runs_again_with_its_key_and_no_second_start(
) -> None:
    plan = plan_of(CHAIN)
    first, before = await full_run(plan)
    prefix = cut_after(first.frames, "b")
    tool = Recorder()
    resumed = await run_durable(plan, {"tool": tool}, prefix=prefix,
                                idempotent=lambda name: True)
    assert tool.ran() == ["b", "c"]
    assert tool.calls[0] == before.calls[1], "the same idempotency key as before the restart"
    assert [(e.node_id, e.phase) for e in resumed.events] == [
        ("b", "done"), ("c", "start"), ("c", "done")]
    assert data_of(resumed.events[0]) == {"resumed": True}
    assert data_of(resumed.events[2]) == {}
    assert resumed.response is not None and first.response is not None
    assert resumed.response.outputs == first.response.outputs
    assert resumed.response.nodes_run == 3
    check_resumed_stream([*first.events[: len(prefix)], *resumed.events], "req-1")


@pytest.mark.asyncio
async def test_resume_rerun_runs_a_tool_that_is_not_idempotent_again() -> None:
    plan = plan_of([{**CHAIN[0]}, {**CHAIN[1], "resume": "rerun"}, CHAIN[2]])
    first, _ = await full_run(plan)
    tool = Recorder()
    resumed = await run_durable(plan, {"tool": tool}, prefix=cut_after(first.frames, "b"))
    assert tool.ran() == ["b", "c"]
    assert resumed.response is not None and resumed.response.success


@pytest.mark.asyncio
async def test_an_interrupted_node_under_on_error_skip_lets_the_chain_go_on() -> None:
    plan = plan_of([CHAIN[0], {**CHAIN[1], "on_error": "skip"},
                    {"node_id": "c", "input": {"z": 1}}])
    first, _ = await full_run(plan)
    tool = Recorder()
    resumed = await run_durable(plan, {"tool": tool}, prefix=cut_after(first.frames, "b"))
    assert tool.ran() == ["c"]
    assert resumed.response is not None and resumed.response.success
    assert [(e.node_id, e.phase) for e in resumed.events] == [
        ("b", "error"), ("c", "start"), ("c", "done")]


MAP = [{"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t",
        "next_node": "after"},
       {"node_id": "t", "input_map": {"i": "item"}},
       {"node_id": "after", "input_map": {"all": "m.output"}}]


@pytest.mark.asyncio
@pytest.mark.parametrize("idempotent", [True, False])
async def test_map_items_are_restored_one_by_one(idempotent: bool) -> None:
    plan = plan_of([MAP[0], {**MAP[1], "on_error": "skip"}, MAP[2]],
                   initial_input={"xs": [1, 2, 3, 4]})
    limits = Limits(max_map_concurrency=1)
    tool = Recorder()
    first = await run_durable(plan, {"tool": tool}, limits=limits)
    prefix = cut_after(first.frames, "t[2]")
    again = Recorder()
    resumed = await run_durable(plan, {"tool": again}, prefix=prefix, limits=limits,
                                idempotent=lambda name: idempotent)
    expected = ["t[2]", "t[3]", "after"] if idempotent else ["t[3]", "after"]
    assert again.ran() == expected
    events = resumed.events
    assert [e.node_id for e in events if e.phase == "start"] == ["t[3]", "after"], (
        "no second start for the map or its in-flight item")
    item2 = next(e for e in events if e.node_id == "t[2]")
    assert item2.phase == ("done" if idempotent else "error")
    assert data_of(item2)["resumed"] is True
    map_done = next(e for e in events if e.node_id == "m")
    assert map_done.phase == "done" and data_of(map_done) == {"resumed": True}
    assert resumed.response is not None and first.response is not None
    outputs = resumed.response.outputs["m"]
    assert outputs[:2] == first.response.outputs["m"][:2], "restored items keep their outputs"
    assert outputs[2] == (first.response.outputs["m"][2] if idempotent else None)
    check_resumed_stream([*first.events[: len(prefix)], *events], "req-1")


def skill_plan() -> tuple[ChainPlan, Any]:
    inner = [ChainNode(node_id="x", kind="tool", name="echo", input={"k": 1}, next_node="y"),
             ChainNode(node_id="y", kind="tool", name="echo", input_map={"k": "x.output.k"})]
    catalog = FakeCatalog(tools=("echo",), skills=("two",))
    limits = SessionLimits(Limits())

    def planner(name: str, nodes: list[ChainNode], entry: str, depth: int) -> ChainPlan:
        return validate_chain(ChainRequest(nodes=nodes, entry_node=entry), catalog, limits,
                              granted=frozenset({"chains"}))

    request = ChainRequest(id="req-1", entry_node="s", nodes=[
        ChainNode(node_id="s", kind="skill", name="two", next_node="z"),
        ChainNode(node_id="z", kind="tool", name="echo", input_map={"v": "s.output"})])
    plan = validate_chain(request, catalog, limits, granted=frozenset({"chains", "skill"}))

    async def skill(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        assert ctx.run_subchain is not None
        return await ctx.run_subchain("two", inner, "x", args)

    return plan, (planner, skill)


@pytest.mark.asyncio
async def test_a_declarative_skills_inner_nodes_are_restored_under_its_prefix() -> None:
    plan, (planner, skill) = skill_plan()
    tool = Recorder()
    first = await run_durable(plan, {"tool": tool, "skill": skill}, subchain_planner=planner)
    assert [f.node_id for f in first.frames if f.phase == "start"] == ["s", "s/x", "s/y", "z"]
    prefix = cut_after(first.frames, "s/y")
    again = Recorder()
    resumed = await run_durable(plan, {"tool": again, "skill": skill}, prefix=prefix,
                                subchain_planner=planner, idempotent=lambda name: True,
                                declared_skill=lambda name: name == "two")
    assert again.ran() == ["s/y", "z"], "s/x is restored, s/y runs again"
    assert [(e.node_id, e.phase) for e in resumed.events] == [
        ("s/y", "done"), ("s", "done"), ("z", "start"), ("z", "done")]
    assert resumed.response is not None and first.response is not None
    assert resumed.response.outputs == first.response.outputs
    check_resumed_stream([*first.events[: len(prefix)], *resumed.events], "req-1")


@pytest.mark.asyncio
async def test_a_python_skill_in_flight_ends_interrupted() -> None:
    plan, (planner, skill) = skill_plan()
    first = await run_durable(plan, {"tool": Recorder(), "skill": skill},
                              subchain_planner=planner)
    again = Recorder()
    resumed = await run_durable(plan, {"tool": again, "skill": skill},
                                prefix=cut_after(first.frames, "s/y"),
                                subchain_planner=planner, idempotent=lambda name: True)
    assert again.calls == []
    assert resumed.response is not None and resumed.response.error is not None
    assert resumed.response.error.code == "interrupted"
    assert [(e.node_id, e.phase) for e in resumed.events] == [
        ("s", "error"), ("s/y", "error")], "the inner node it never reached ends too"


@pytest.mark.asyncio
async def test_a_deadline_passed_while_down_ends_the_run_as_timeout_at_once() -> None:
    plan = plan_of(CHAIN)
    first, _ = await full_run(plan)
    tool = Recorder()
    resumed = await run_durable(plan, {"tool": tool}, prefix=cut_after(first.frames, "b"),
                                idempotent=lambda name: True, timeout_left=0.0)
    assert tool.calls == []
    assert resumed.response is not None and resumed.response.error is not None
    assert resumed.response.error.code == "timeout"
    assert [(e.node_id, e.phase) for e in resumed.events] == [("b", "error")]
    assert data_of(resumed.events[0]) == {"resumed": True}


@pytest.mark.asyncio
async def test_an_abort_on_the_log_ends_the_run_with_it_and_runs_nothing() -> None:
    plan = plan_of([{"node_id": "a", "name": "fail"}, {"node_id": "b", "input": {"q": 1}}])
    tool = Recorder()
    first = await run_durable(plan, {"tool": tool}, limits=Limits(max_concurrency=2))
    assert first.response is not None and first.response.error is not None
    prefix = cut_after(first.frames, "a", "error")
    again = Recorder()
    resumed = await run_durable(plan, {"tool": again}, prefix=prefix,
                                idempotent=lambda name: True)
    assert again.calls == []
    assert resumed.response is not None and resumed.response.error is not None
    assert resumed.response.error.code == "chain_node_error"
    assert resumed.response.error.node_id == "a"
    check_resumed_stream([*first.events[: len(prefix)], *resumed.events], "req-1")


@pytest.mark.asyncio
async def test_a_map_resumed_after_an_item_failed_fails_at_that_item_not_a_stopped_one(
) -> None:
    from a2e_host.chains.messages import ChainEvent
    from a2e_host.chains.resume import checkpoint_of
    from a2e_host.codec import encode_message
    from a2e_host.errors import ChainFailure

    plan = plan_of(MAP, initial_input={"xs": [1, 2, 3]})
    failed = ChainFailure(code="chain_node_error", message="item one broke", node_id="t")

    def stored(seq: int, node: str, phase: str, error: str = "",
               failure: ChainFailure | None = None) -> StoredFrame:
        event = ChainEvent(req_id="req-1", seq=seq, node_id=node, phase=phase, error=error)
        return StoredFrame(seq, node, phase, encode_message(event),
                           checkpoint_of(phase, None, failure))

    prefix = [stored(1, "m", "start"), stored(2, "t[0]", "start"), stored(3, "t[1]", "start"),
              stored(4, "t[1]", "error", "item one broke", failed),
              stored(5, "t[0]", "error", "cancelled: another item of the map failed")]
    tool = Recorder()
    resumed = await run_durable(plan, {"tool": tool}, prefix=prefix,
                                idempotent=lambda name: True)
    assert tool.calls == [], "no item runs again: each one's end is on the log"
    assert resumed.response is not None and resumed.response.error is not None
    assert resumed.response.error.details == {"index": 1}
    assert "item one broke" in resumed.response.error.message
    assert [(e.node_id, e.phase) for e in resumed.events] == [("m", "error")]
