"""The scheduler's pure part (a2e_host.chains.outcome), table by table, without async code.

Source: PROTOCOL.md §3 (a handler's ``error``), §5 (errors, cancel messages,
``final_output``, map items), §6 (request-wide ceilings).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

import pytest

from a2e_host.chains.messages import ChainNode, ChainRequest
from a2e_host.chains.outcome import (
    EndReason,
    NodeFailure,
    cancel_message,
    exhausts_request,
    final_output,
    handler_error,
    is_handled,
    item_is_skipped,
    map_failure,
    named_failure,
    response_failure,
    subchain_error,
)
from a2e_host.chains.plan import NodeStatus
from a2e_host.chains.validation import ChainPlan, validate_chain
from a2e_host.errors import ChainFailure
from a2e_host.exceptions import ChainError, ChainLimitExceeded, NodeError
from a2e_host.limits import Limits, SessionLimits

DONE, ERROR, SKIP, PENDING = NodeStatus.DONE, NodeStatus.ERROR, NodeStatus.SKIP, NodeStatus.PENDING


class _Tools:
    def tool_names(self) -> Collection[str]:
        return {"echo"}

    def skill_names(self) -> Collection[str]:
        return set()

    def check_proc(self, node: ChainNode) -> str | None:
        return None


def plan_of(nodes: list[dict[str, Any]]) -> ChainPlan:
    request = ChainRequest(
        id="r", nodes=[ChainNode(**{"kind": "tool", "name": "echo", **n}) for n in nodes],
        entry_node=nodes[0]["node_id"],
    )
    return validate_chain(request, _Tools(), SessionLimits(Limits()), granted=frozenset())


# a (abort), b (skip), c (handled by h), h the handler, z a second terminal
PLAN = plan_of([
    {"node_id": "a"},
    {"node_id": "b", "on_error": "skip"},
    {"node_id": "c", "on_error": "h"},
    {"node_id": "h"},
    {"node_id": "z"},
])
A, B, C, H, Z = range(5)


def failure(message: str = "broke", **fields: Any) -> ChainFailure:
    return ChainFailure(code="chain_node_error", message=message, **fields)


# ── cancel messages ─────────────────────────────────────────────────────────


@pytest.mark.parametrize(
    ("reason", "aborted", "item", "message"),
    [
        (EndReason.TIMEOUT, "", False, "cancelled: the chain timed out after 1.5 s"),
        (EndReason.TIMEOUT, "", True, "cancelled: the chain timed out after 1.5 s"),
        (EndReason.ABORT, "s/bad", False,
         "cancelled: node 's/bad' failed and the chain was aborted"),
        (EndReason.ABORT, "bad", True, "cancelled: node 'bad' failed and the chain was aborted"),
        (EndReason.CANCELLED, "", False, "cancelled: the chain was cancelled"),
        (EndReason.CANCELLED, "", True, "cancelled: the chain was cancelled"),
        (None, "", True, "cancelled: another item of the map failed"),
        (None, "", False, "cancelled: the chain was cancelled"),
    ],
)
def test_a_stopped_node_or_item_is_told_why_the_run_ended(
    reason: EndReason | None, aborted: str, item: bool, message: str
) -> None:
    assert cancel_message(reason, timeout=1.5, aborted=aborted, item=item) == message


# ── handled failures and the response's error ───────────────────────────────


@pytest.mark.parametrize(
    ("index", "handler_status", "handled"),
    [(A, PENDING, False), (B, PENDING, True), (C, DONE, True), (C, ERROR, False),
     (C, SKIP, False)],
)
def test_only_skip_and_a_handler_that_is_done_handle_a_failure(
    index: int, handler_status: int, handled: bool
) -> None:
    status = [PENDING] * 5
    status[H] = handler_status
    assert is_handled(PLAN.nodes[index], status) is handled


@pytest.mark.parametrize(
    ("message", "shown", "named"),
    [
        ("tool exploded", "x", "node 'x' failed: tool exploded"),
        ("node 'x' field 'input_map.v': failed", "x", "node 'x' field 'input_map.v': failed"),
        ("node 'x' broke", "s/x", "node 's/x' failed: node 'x' broke"),
    ],
)
def test_the_response_names_the_failed_node_unless_the_message_already_does(
    message: str, shown: str, named: str
) -> None:
    given = failure(message, node_id="x", details={"index": 2}, retryable=True)
    assert named_failure(given, shown) == failure(
        named, node_id="x", details={"index": 2}, retryable=True
    )


def _response_failure(reason: EndReason | None, *, abort: NodeFailure | None = None,
                      failures: tuple[NodeFailure, ...] = (),
                      handler: int = PENDING) -> ChainFailure | None:
    status = [DONE] * 5
    status[H] = handler
    return response_failure(reason, plan_nodes=PLAN.nodes, prefix="", timeout=2.0,
                            abort=abort, failures=failures, status=status)


def test_an_aborted_run_reports_the_aborting_failure_naming_its_node() -> None:
    got = _response_failure(EndReason.ABORT, abort=NodeFailure(A, failure(node_id="a")))
    assert got == failure("node 'a' failed: broke", node_id="a")


def test_a_timed_out_or_cancelled_run_reports_the_chain_not_a_node() -> None:
    late = NodeFailure(B, failure(node_id="b"))
    assert _response_failure(EndReason.TIMEOUT, failures=(late,)) == ChainFailure(
        code="timeout", message="the chain did not finish within its timeout of 2 s",
        retryable=True, details={"timeout": 2.0},
    )
    assert _response_failure(EndReason.CANCELLED, failures=(late,)) == ChainFailure(
        code="cancelled", message="the chain was cancelled before it finished"
    )


@pytest.mark.parametrize(
    ("failed", "handler", "expected_node"),
    [((), PENDING, None), ((B,), PENDING, None), ((C,), DONE, None), ((C,), ERROR, "c"),
     ((B, C), ERROR, "c"), ((C, B), ERROR, "c")],
)
def test_a_finished_run_fails_with_its_first_unhandled_failure(
    failed: tuple[int, ...], handler: int, expected_node: str | None
) -> None:
    failures = tuple(NodeFailure(i, failure(node_id=PLAN.nodes[i].node_id)) for i in failed)
    got = _response_failure(EndReason.DONE, failures=failures, handler=handler)
    assert (got.node_id if got is not None else None) == expected_node


def test_a_sub_chain_s_failure_names_its_node_with_the_prefix() -> None:
    got = response_failure(EndReason.ABORT, plan_nodes=PLAN.nodes, prefix="outer/",
                           timeout=1.0, abort=NodeFailure(A, failure(node_id="a")),
                           failures=(), status=[DONE] * 5)
    assert got is not None and got.message == "node 'outer/a' failed: broke"
    assert got.node_id == "a"


@pytest.mark.parametrize(
    ("status", "final"),
    [([DONE] * 5, "z-out"), ([DONE, DONE, DONE, DONE, ERROR], "h-out"),
     ([DONE, DONE, DONE, SKIP, SKIP], "b-out"), ([ERROR] * 5, None)],
)
def test_final_output_is_the_last_terminal_that_is_done(status: list[int], final: Any) -> None:
    outputs = {n.node_id: f"{n.node_id}-out" for n in PLAN.nodes}
    # terminals of PLAN in declaration order: a, b, h, z (c's only edge goes to h)
    assert [PLAN.nodes[t].node_id for t in PLAN.terminals] == ["a", "b", "h", "z"]
    assert final_output(PLAN.nodes, PLAN.terminals, status, outputs) == final


def test_a_handler_sees_node_code_and_message_and_a_map_item_s_index() -> None:
    assert handler_error("c", failure("x broke")) == {
        "node_id": "c", "code": "chain_node_error", "message": "x broke"
    }
    assert handler_error("m", failure("item broke", details={"index": 4, "field": "f"})) == {
        "node_id": "m", "code": "chain_node_error", "message": "item broke", "index": 4
    }


# ── map items and sub-chains ────────────────────────────────────────────────

REQUEST_CEILING = ChainLimitExceeded(
    "too many", node_id="t", details={"ceiling": "max_total_nodes", "scope": "host",
                                      "limit": 5, "requested": 6}
)
ITEM_CEILING = ChainLimitExceeded(
    "node 't[1]' output is 20 bytes, over max_output_bytes 10", node_id="t",
    details={"ceiling": "max_output_bytes", "scope": "host", "limit": 10, "requested": 20},
)


@pytest.mark.parametrize(
    ("on_error", "exc", "skipped"),
    [("skip", NodeError("x"), True), ("skip", ValueError("v"), True),
     ("skip", ITEM_CEILING, True), ("skip", REQUEST_CEILING, False),
     ("abort", NodeError("x"), False)],
)
def test_a_skipped_item_becomes_null_unless_the_request_is_exhausted(
    on_error: str, exc: BaseException, skipped: bool
) -> None:
    assert item_is_skipped(on_error, exc) is skipped
    assert exhausts_request(exc) is (exc is REQUEST_CEILING)


def test_a_failed_item_fails_its_map_as_a_node_error_naming_the_item() -> None:
    for exc, text in [(NodeError("upper: bad"), "upper: bad"), (KeyError("k"), "KeyError: 'k'")]:
        got = map_failure(exc, 3, "s/m", "m")
        assert type(got) is NodeError
        assert (got.message, got.node_id, got.details) == (
            f"map node 's/m' failed at item 3: {text}", "m", {"index": 3}
        )


@pytest.mark.parametrize("exc", [ITEM_CEILING, REQUEST_CEILING], ids=["item", "request"])
def test_a_ceiling_that_refused_an_item_fails_the_map_as_chain_limit(exc: ChainError) -> None:
    got = map_failure(exc, 1, "m", "m")
    assert type(got) is ChainLimitExceeded
    assert got.message == f"map node 'm' failed at item 1: {exc.message}"
    assert got.details == {**exc.details, "index": 1}


def test_the_map_s_own_ceiling_keeps_its_message() -> None:
    own = ChainLimitExceeded("map node 'm' output would be at least 99 bytes", node_id="m",
                             details={"ceiling": "max_output_bytes", "limit": 50})
    got = map_failure(own, 7, "m", "m")
    assert (got.message, got.details) == (own.message, {**own.details, "index": 7})


def test_a_failed_sub_chain_fails_its_skill_node_with_its_code_and_details() -> None:
    got = subchain_error("summarize", ChainFailure(
        code="chain_limit", message="node 'x' too big", node_id="x",
        details={"ceiling": "max_output_bytes"},
    ))
    assert (got.code, got.message, got.details) == (
        "chain_limit", "skill 'summarize' failed: node 'x' too big",
        {"ceiling": "max_output_bytes"},
    )
