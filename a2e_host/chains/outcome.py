"""What a chain run's attempts and the run itself come to: the pure part of the scheduler.

Layer: core (no anyio, no I/O, no clock). The runtime (:mod:`a2e_host.chains.scheduler`,
:mod:`a2e_host.chains.attempt`) runs nodes; this module answers, from plain values, the
questions whose answers reach the wire (PROTOCOL.md §5):

* why a run ended (:class:`EndReason`) and what an attempt at a node or map item came to
  (:class:`Outcome`);
* the text of the ``error`` event a node gets when the run ends under it
  (:func:`cancel_message`);
* whether a node's failure is handled (:func:`is_handled`), so the chain still succeeds;
* the response's ``error`` (:func:`response_failure`) and ``final_output``
  (:func:`final_output`), gathered in a :class:`RunResult`;
* how a map fails when one of its items does (:func:`item_is_skipped`,
  :func:`map_failure`), and a skill node when its sub-chain does
  (:func:`subchain_error`);
* the ``error`` a handler node sees in its context (:func:`handler_error`).

Everything here is synchronous and table-tested (``tests/test_chains_outcome.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from ..errors import ChainFailure, cancelled_failure, failure_message_of, timeout_failure
from ..exceptions import ChainError, ChainLimitExceeded, NodeError
from .messages import ChainRequest, ChainResponse
from .plan import NodeStatus
from .validation import ChainPlan, PlanNode

__all__ = [
    "EndReason",
    "NodeFailure",
    "Outcome",
    "OutcomeKind",
    "RunResult",
    "cancel_message",
    "exhausts_request",
    "final_output",
    "handler_error",
    "is_handled",
    "item_is_skipped",
    "map_failure",
    "named_failure",
    "response_failure",
    "response_of",
    "run_result",
    "subchain_error",
]


class EndReason(enum.Enum):
    """Why a run ended (a run still going has none: ``None``).

    DONE: every node finished or was skipped. ABORT: a node failed under
    ``on_error: abort``. TIMEOUT: the chain's ``timeout`` passed. CANCELLED: a
    ``chain/cancel``, the connection closing, or the task running it being cancelled.
    """

    DONE = "done"
    ABORT = "abort"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


class OutcomeKind(enum.Enum):
    """What one attempt at a node or map item came to.

    DONE: its output was checked and its ``done`` event sent. FAILED: it raised; its
    ``error`` event was sent. NOT_STARTED: the run ended before it started (no event).
    LATE: it finished after the run ended; its result is discarded and its ``error``
    event says why the run ended.
    """

    DONE = "done"
    FAILED = "failed"
    NOT_STARTED = "not_started"
    LATE = "late"


class Outcome(msgspec.Struct, frozen=True):
    """One attempt's outcome (see :class:`OutcomeKind`). A Struct: one is built per node
    and map item, and a Struct is built several times faster than a named tuple.

    Attributes:
        kind: what it came to.
        output: the output when DONE (a map: its list), else None.
        size: the output's encoded size in bytes when DONE (a map: 0, its items counted
            their own), else 0.
        taken: a branch's taken side (node index), or None.
        error: what it raised when FAILED, else None.
        failure: that error as the response would carry it, when FAILED.
    """

    kind: OutcomeKind
    output: Any = None
    size: int = 0
    taken: int | None = None
    error: BaseException | None = None
    failure: ChainFailure | None = None


NOT_STARTED = Outcome(OutcomeKind.NOT_STARTED)
LATE = Outcome(OutcomeKind.LATE)


class NodeFailure(msgspec.Struct, frozen=True):
    """A declared node's failure, kept until the run ends: its plan index and the failure
    (``failure.message`` as the node's ``error`` event showed it)."""

    node_index: int
    failure: ChainFailure


@dataclass(slots=True)
class RunResult:
    """What a finished run produced (the sub-chain API returns it; the top level turns it
    into a ``chain/resp``): the response's ``success``, ``outputs``, ``final_output``,
    ``nodes_run`` and ``error`` (PROTOCOL.md §5)."""

    success: bool
    outputs: dict[str, Any]
    final_output: Any
    nodes_run: int
    error: ChainFailure | None


def cancel_message(
    reason: EndReason | None, *, timeout: float, aborted: str = "", item: bool = False
) -> str:
    """The ``error`` event text of a node or map item stopped before it finished.

    Args:
        reason: why the run (or the run around it, for a sub-chain) ended; None when it
            has not: a map item is then stopped because another item failed.
        timeout: the ended run's ``timeout``, seconds.
        aborted: the failed node's display id when ``reason`` is ABORT.
        item: whether a map item (rather than a node) was stopped.
    """
    if reason is EndReason.TIMEOUT:
        return f"cancelled: the chain timed out after {timeout:g} s"
    if reason is EndReason.ABORT and aborted:
        return f"cancelled: node {aborted!r} failed and the chain was aborted"
    if reason is None and item:
        return "cancelled: another item of the map failed"
    return "cancelled: the chain was cancelled"


def is_handled(pnode: PlanNode, status: Sequence[int]) -> bool:
    """Whether ``pnode``'s failure leaves the chain a success (PROTOCOL.md §5): under
    ``on_error: skip``, or under a handler that is done (``status`` per node index)."""
    if pnode.on_error == "skip":
        return True
    if pnode.on_error == "handler" and pnode.handler_index is not None:
        return status[pnode.handler_index] == NodeStatus.DONE
    return False


def named_failure(failure: ChainFailure, shown: str) -> ChainFailure:
    """``failure`` with a message that names its node: ``"node 'x' failed: …"`` unless it
    already names ``shown`` (the node's display id, ``outer/inner`` in a skill)."""
    if repr(shown) in failure.message:
        return failure
    return msgspec.structs.replace(failure, message=f"node {shown!r} failed: {failure.message}")


def response_failure(
    reason: EndReason | None,
    *,
    plan_nodes: Sequence[PlanNode],
    prefix: str,
    timeout: float,
    abort: NodeFailure | None,
    failures: Sequence[NodeFailure],
    status: Sequence[int],
) -> ChainFailure | None:
    """The response's ``error`` for a run that ended for ``reason`` (PROTOCOL.md §5).

    ABORT: the aborting failure. TIMEOUT / CANCELLED: the chain's. DONE: the first
    failure not handled (:func:`is_handled`), or None when the chain succeeded. A node's
    failure names its node (:func:`named_failure`, ``prefix`` + its id).
    """
    if reason is EndReason.ABORT and abort is not None:
        return named_failure(abort.failure, prefix + plan_nodes[abort.node_index].node_id)
    if reason is EndReason.TIMEOUT:
        return timeout_failure(timeout)
    if reason is EndReason.CANCELLED:
        return cancelled_failure()
    for f in failures:
        if not is_handled(plan_nodes[f.node_index], status):
            return named_failure(f.failure, prefix + plan_nodes[f.node_index].node_id)
    return None


def final_output(
    plan_nodes: Sequence[PlanNode],
    terminals: Sequence[int],
    status: Sequence[int],
    outputs: Mapping[str, Any],
) -> Any:
    """The output of the last terminal node, in declaration order, that is done; None
    when none is (PROTOCOL.md §5)."""
    for t in reversed(terminals):
        if status[t] == NodeStatus.DONE:
            return outputs.get(plan_nodes[t].node_id)
    return None


def run_result(
    plan: ChainPlan,
    end: EndReason | None,
    prefix: str,
    status: Sequence[int],
    abort: NodeFailure | None,
    failures: Sequence[NodeFailure],
    outputs: dict[str, Any],
    nodes_run: int,
) -> RunResult:
    """What a run that ended for ``end`` produced: :func:`response_failure` and
    :func:`final_output` over its plan's ``status`` (per node index) and ``outputs``."""
    error = response_failure(end, plan_nodes=plan.nodes, prefix=prefix, timeout=plan.timeout,
                             abort=abort, failures=failures, status=status)
    final = final_output(plan.nodes, plan.terminals, status, outputs)
    return RunResult(error is None, outputs, final, nodes_run, error)


def response_of(request: ChainRequest, result: RunResult, duration_ms: int) -> ChainResponse:
    """The ``chain/resp`` of a finished run (PROTOCOL.md §5): ``outputs`` only when the
    request's ``include_outputs`` asks for them."""
    return ChainResponse(
        req_id=request.id,
        chain_id=request.chain_id,
        success=result.success,
        outputs=result.outputs if request.include_outputs else {},
        final_output=result.final_output,
        duration_ms=duration_ms,
        nodes_run=result.nodes_run,
        error=result.error,
    )


def handler_error(failed_id: str, failure: ChainFailure) -> dict[str, Any]:
    """The ``error`` a handler node sees in its context (PROTOCOL.md §3): ``{node_id,
    code, message}`` of the failure that fired it, plus ``index`` when a map item's."""
    error: dict[str, Any] = {
        "node_id": failed_id, "code": failure.code, "message": failure.message
    }
    if "index" in failure.details:
        error["index"] = failure.details["index"]
    return error


_REQUEST_CEILINGS = frozenset({"max_chain_output_bytes", "max_total_nodes"})


def exhausts_request(exc: BaseException) -> bool:
    """Whether a failure is a request-wide ceiling refusing (``max_chain_output_bytes``,
    ``max_total_nodes``): the request's budget does not come back, so a map whose item
    fails so fails as a whole, whatever the template's ``on_error``."""
    return (
        isinstance(exc, ChainError)
        and exc.code == "chain_limit"
        and exc.details.get("ceiling") in _REQUEST_CEILINGS
    )


def item_is_skipped(on_error: str, exc: BaseException) -> bool:
    """Whether a failed map item becomes a null in the map's output (the template's
    ``on_error: skip``) rather than failing the map (PROTOCOL.md §5, map items)."""
    return on_error == "skip" and not exhausts_request(exc)


def map_failure(exc: BaseException, index: int, shown: str, node_id: str) -> ChainError:
    """What a map node raises when item ``index`` failed with ``exc`` (or the map's own
    output ceiling refused at that item).

    A ceiling (the map's own, a request-wide one, or an item's expression or output
    budget) fails the map as ``chain_limit`` naming it; anything else as
    ``chain_node_error``. Either way ``details["index"]`` is the item.

    Args:
        exc: the item's exception, or the map's own :class:`ChainLimitExceeded`.
        index: the item.
        shown: the map's display id; node_id: its id.
    """
    message = failure_message_of(exc)
    own = isinstance(exc, ChainLimitExceeded) and exc.node_id == node_id
    if isinstance(exc, ChainError) and (
        isinstance(exc, ChainLimitExceeded) or exhausts_request(exc)
    ):
        return ChainLimitExceeded(
            message if own else f"map node {shown!r} failed at item {index}: {message}",
            node_id=node_id,
            details={**exc.details, "index": index},
        )
    return NodeError(
        f"map node {shown!r} failed at item {index}: {message}",
        node_id=node_id,
        details={"index": index},
    )


def subchain_error(skill_name: str, failure: ChainFailure) -> ChainError:
    """What a skill node raises when its sub-chain ended without success: the sub-chain's
    code and details, its message after ``skill '<name>' failed:``."""
    return ChainError(
        f"skill {skill_name!r} failed: {failure.message}",
        code=failure.code,
        details=failure.details,
    )
