"""Reading a durable run's log and folding it into a plan's starting state, case by case
(PROTOCOL.md §5 Resume). Pure: no runner, no loop."""

from __future__ import annotations

from typing import Any

import pytest

from a2e_host.chains.messages import ChainEvent, ChainNode, ChainRequest
from a2e_host.chains.plan import NodeStatus
from a2e_host.chains.resume import (
    INTERRUPTED,
    checkpoint_of,
    fold_plan,
    interrupted_failure,
    may_rerun,
    plan_hash,
    read_log,
)
from a2e_host.chains.validation import ChainPlan, PlanNode, validate_chain
from a2e_host.codec import encode_message
from a2e_host.errors import ChainFailure
from a2e_host.limits import Limits, SessionLimits
from a2e_host.messages import new_id
from a2e_host.store import StoredFrame
from tests.support.chains import ALL_CAPS, FakeCatalog, plan_of

FAILED = ChainFailure(code="chain_node_error", message="node 'a' failed: boom", node_id="a")


def frame(seq: int, node: str, phase: str, output: Any = None, *, error: str = "",
          failure: ChainFailure | None = None, kept: bool = True, kind: str = "status",
          event_output: bool = True) -> StoredFrame:
    """One stored event; ``kept`` keeps its checkpoint beside it, as a durable run does."""
    event = ChainEvent(req_id="req-1", seq=seq, node_id=node, phase=phase, kind=kind,
                       output=output if event_output else None, error=error)
    stored = checkpoint_of(phase, output, failure) if kept and kind == "status" else None
    return StoredFrame(seq, node, phase, encode_message(event), stored)


def status_of(plan: ChainPlan, statuses: list[int], node_id: str) -> str:
    return NodeStatus.NAMES[statuses[plan.by_id[node_id]]]


# ── reading the log ─────────────────────────────────────────────────────────────


def test_an_empty_log_has_nothing_recorded_and_starts_at_seq_zero() -> None:
    log = read_log([])
    assert (log.records, log.in_flight, log.last_seq) == ({}, {}, 0)


def test_a_start_without_its_terminal_event_is_in_flight() -> None:
    log = read_log([frame(1, "a", "start"), frame(2, "a", "done", {"x": 1}),
                    frame(3, "b", "start")])
    assert log.in_flight == {"b": 3}
    assert set(log.records) == {"a"}
    assert log.last_seq == 3


def test_a_progress_event_does_not_end_a_node_in_flight() -> None:
    log = read_log([frame(1, "a", "start"),
                    frame(2, "a", "start", kind="progress")])
    assert log.in_flight == {"a": 1}
    assert log.records == {}


def test_a_done_output_comes_from_its_checkpoint_when_the_event_carried_none() -> None:
    log = read_log([frame(1, "a", "start"),
                    frame(2, "a", "done", {"big": [1, 2]}, event_output=False)])
    record = log.records["a"]
    assert (record.phase, record.seq, record.output) == ("done", 2, {"big": [1, 2]})
    assert record.size == len(b'{"big":[1,2]}')


def test_a_done_output_comes_from_the_frame_when_no_checkpoint_was_kept() -> None:
    log = read_log([frame(1, "a", "start"), frame(2, "a", "done", [1, "x"], kept=False)])
    assert log.records["a"].output == [1, "x"]
    assert log.records["a"].size == len(b'[1,"x"]')


def test_an_error_keeps_its_failure_code_from_the_checkpoint() -> None:
    limit = ChainFailure(code="chain_limit", message="too big", node_id="a",
                         details={"ceiling": "max_output_bytes"})
    log = read_log([frame(1, "a", "start"),
                    frame(2, "a", "error", error="too big", failure=limit)])
    assert log.records["a"].failure == limit


def test_an_error_without_a_checkpoint_is_a_stop_not_a_failure() -> None:
    log = read_log([frame(1, "a", "start"),
                    frame(2, "a", "error", error="cancelled: the chain timed out after 5 s",
                          kept=False)])
    assert log.records["a"].phase == "error"
    assert log.records["a"].failure is None


def test_a_stopped_node_is_not_applied_as_a_failure_and_aborts_nothing() -> None:
    plan = plan_of([{"node_id": "a", "next_node": "b"}, {"node_id": "b"}])
    start = fold_plan(plan, {}, read_log([
        frame(1, "a", "start"), frame(2, "a", "error", error="cancelled", kept=False)]))
    assert (start.abort, start.failures, start.ready) == (None, [], [])
    assert status_of(plan, start.state.status, "a") == "error"
    assert status_of(plan, start.state.status, "b") == "pending"


def test_skips_items_and_inner_nodes_are_recorded_by_display_id() -> None:
    log = read_log([frame(1, "m", "start"), frame(2, "t[0]", "start"),
                    frame(3, "t[0]", "done", 5), frame(4, "s/x", "start"),
                    frame(5, "z", "skip")])
    assert set(log.records) == {"t[0]", "z"}
    assert log.records["z"].phase == "skip"
    assert log.in_flight == {"m": 1, "s/x": 4}


def test_frames_about_no_node_only_move_the_last_seq() -> None:
    log = read_log([StoredFrame(1, "", "", b"{}", None), frame(2, "a", "start")])
    assert log.last_seq == 2
    assert log.in_flight == {"a": 2}


# ── folding a plan ──────────────────────────────────────────────────────────────


def test_nothing_recorded_leaves_the_roots_ready() -> None:
    plan = plan_of([{"node_id": "a", "next_node": "b"}, {"node_id": "b"},
                    {"node_id": "c"}])
    start = fold_plan(plan, {"q": 1}, read_log([]))
    assert start.ready == [plan.by_id["a"], plan.by_id["c"]]
    assert start.context == {"input": {"q": 1}}
    assert (start.nodes_run, start.kept, start.abort) == (0, 0, None)


def test_a_done_node_is_restored_and_its_successor_is_ready() -> None:
    plan = plan_of([{"node_id": "a", "next_node": "b"}, {"node_id": "b"}])
    start = fold_plan(plan, {}, read_log([frame(1, "a", "start"),
                                          frame(2, "a", "done", {"v": 7})]))
    assert start.outputs == {"a": {"v": 7}}
    assert start.context["a"] == {"output": {"v": 7}, "status": "done"}
    assert start.ready == [plan.by_id["b"]]
    assert start.nodes_run == 1
    assert start.kept == len(b'{"v":7}')
    assert status_of(plan, start.state.status, "a") == "done"


def test_an_in_flight_node_is_ready_not_restored() -> None:
    plan = plan_of([{"node_id": "a", "next_node": "b"}, {"node_id": "b"}])
    start = fold_plan(plan, {}, read_log([frame(1, "a", "start"), frame(2, "a", "done", 1),
                                          frame(3, "b", "start")]))
    assert start.ready == [plan.by_id["b"]]
    assert "b" not in start.outputs
    assert start.nodes_run == 1  # b counts when it resumes


def test_a_recorded_branch_takes_its_side_and_skips_the_other() -> None:
    nodes = [{"node_id": "br", "kind": "branch", "condition": "input.go", "true_node": "yes",
              "false_node": "no"}, {"node_id": "yes"}, {"node_id": "no"}]
    plan = plan_of(nodes)
    log = read_log([frame(1, "br", "start"),
                    frame(2, "br", "done", {"condition": True, "taken": "yes"})])
    start = fold_plan(plan, {"go": True}, log)
    assert start.ready == [plan.by_id["yes"]]
    assert start.unsent_skips == [plan.by_id["no"]], "the skip the log lost is sent"
    assert start.context["no"] == {"output": None, "status": "skip"}


def test_a_skip_on_the_log_is_not_sent_again() -> None:
    nodes = [{"node_id": "br", "kind": "branch", "condition": "input.go", "true_node": "yes",
              "false_node": "no"}, {"node_id": "yes"}, {"node_id": "no"}]
    plan = plan_of(nodes)
    log = read_log([frame(1, "br", "start"),
                    frame(2, "br", "done", {"condition": True, "taken": "yes"}),
                    frame(3, "no", "skip")])
    start = fold_plan(plan, {"go": True}, log)
    assert start.unsent_skips == []
    assert status_of(plan, start.state.status, "no") == "skip"


@pytest.mark.parametrize(("on_error", "ready", "failures", "aborts"), [
    ("skip", ["h", "b"], 1, False),  # h is a root unless it handles a
    ("h", ["h"], 1, False),
    ("abort", ["h"], 0, True),
])
def test_a_recorded_error_is_applied_as_its_on_error_says(
    on_error: str, ready: list[str], failures: int, aborts: bool
) -> None:
    plan = plan_of([{"node_id": "a", "next_node": "b", "on_error": on_error},
                    {"node_id": "b"}, {"node_id": "h"}], entry="a")
    log = read_log([frame(1, "a", "start"), frame(2, "a", "error", error="boom",
                                                  failure=FAILED)])
    start = fold_plan(plan, {}, log)
    assert [plan.nodes[i].node_id for i in start.ready] == ready
    assert len(start.failures) == failures
    assert (start.abort is not None) == aborts
    assert start.context["a"] == {"output": None, "status": "error"}
    if aborts:
        assert start.abort is not None and start.abort.failure == FAILED


def test_records_apply_in_seq_order_so_a_shared_handler_sees_the_last_failure() -> None:
    plan = plan_of([{"node_id": "a", "on_error": "h"}, {"node_id": "b", "on_error": "h"},
                    {"node_id": "h"}])
    failed_b = ChainFailure(code="chain_node_error", message="b", node_id="b")
    log = read_log([frame(1, "b", "start"), frame(2, "a", "start"),
                    frame(3, "b", "error", error="b", failure=failed_b),
                    frame(4, "a", "error", error="a", failure=FAILED)])
    start = fold_plan(plan, {}, log)
    assert start.state.handled_by[plan.by_id["h"]] == plan.by_id["a"]
    assert [f.failure.node_id for f in start.failures] == ["b", "a"]


def test_a_skill_plans_records_are_read_under_its_prefix() -> None:
    plan = plan_of([{"node_id": "x", "next_node": "y"}, {"node_id": "y"}])
    log = read_log([frame(1, "s/x", "start"), frame(2, "s/x", "done", 3),
                    frame(3, "x", "start")])
    inner = fold_plan(plan, {"i": 1}, log, prefix="s/")
    assert inner.outputs == {"x": 3}
    assert inner.ready == [plan.by_id["y"]]
    outer = fold_plan(plan, {}, log)
    assert outer.outputs == {}, "an unprefixed plan reads only its own ids"


def test_the_fold_only_reads_the_log() -> None:
    plan = plan_of([{"node_id": "a", "next_node": "b"}, {"node_id": "b"}])
    log = read_log([frame(1, "a", "start"), frame(2, "a", "done", 1), frame(3, "b", "start")])
    before = (dict(log.records), dict(log.in_flight), log.last_seq)
    first = fold_plan(plan, {}, log)
    second = fold_plan(plan, {}, log)
    assert (dict(log.records), dict(log.in_flight), log.last_seq) == before
    assert (first.outputs, first.ready) == (second.outputs, second.ready)


# ── what may run again ──────────────────────────────────────────────────────────


def pnode_of(kind: str, resume: str = "") -> PlanNode:
    fields: dict[str, Any] = {"node_id": "n", "kind": kind, "resume": resume}
    others: list[dict[str, Any]] = []
    if kind == "tool":
        fields["name"] = "echo"
    elif kind == "proc":
        fields["input"] = {"argv": ["echo"]}
    elif kind == "skill":
        fields["name"] = "s"
    elif kind == "branch":
        fields.update(condition="input.x", true_node="t")
        others.append({"node_id": "t", "kind": "tool", "name": "echo"})
    else:
        fields.update(items_path="input.xs", map_node="t")
        others.append({"node_id": "t", "kind": "tool", "name": "echo",
                       "input_map": {"i": "item"}})
    request = ChainRequest(nodes=[ChainNode(**fields), *(ChainNode(**o) for o in others)],
                           entry_node="n")
    plan = validate_chain(request, FakeCatalog(tools=("echo",), skills=("s",)),
                          SessionLimits(Limits()), granted=ALL_CAPS)
    return plan.nodes[0]


@pytest.mark.parametrize(("kind", "resume", "idempotent", "declared", "reruns"), [
    ("tool", "", False, False, False),
    ("tool", "", True, False, True),
    ("tool", "rerun", False, False, True),
    ("proc", "", False, False, False),
    ("proc", "rerun", False, False, True),
    ("skill", "", False, False, False),
    ("skill", "", False, True, True),
    ("skill", "rerun", False, False, True),
    ("branch", "", False, False, True),
    ("map", "", False, False, True),
])
def test_an_in_flight_node_runs_again_only_when_it_may(
    kind: str, resume: str, idempotent: bool, declared: bool, reruns: bool
) -> None:
    pnode = pnode_of(kind, resume)
    assert may_rerun(pnode, idempotent=idempotent, declared_skill=declared) is reruns


def test_an_interrupted_node_fails_with_its_own_code_and_a_fix() -> None:
    failure = interrupted_failure("s/x", "x")
    assert failure.code == INTERRUPTED
    assert failure.node_id == "x"
    assert failure.retryable is True
    assert failure.details == {"resumed": True}
    assert "'s/x'" in failure.message and "resume to 'rerun'" in failure.message


# ── drift ───────────────────────────────────────────────────────────────────────


def test_the_plan_hash_changes_with_a_tools_schema_and_not_with_name_order() -> None:
    request = encode_message(ChainRequest(id=new_id(), nodes=[]))
    a = {"echo": {"input": {"type": "object"}}, "add": {"input": {"type": "object"}}}
    same = {"add": {"input": {"type": "object"}}, "echo": {"input": {"type": "object"}}}
    changed = {**a, "echo": {"input": {"type": "string"}}}
    assert plan_hash(request, a) == plan_hash(request, same)
    assert plan_hash(request, a) != plan_hash(request, changed)
    assert plan_hash(request, a) != plan_hash(request + b" ", a)
