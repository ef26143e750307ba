"""One attempt at a node or a map item: the node lifecycle, written once.

Layer: runtime (anyio). Source: PROTOCOL.md §5 (events, errors), §6 (ceilings).

:func:`run_attempt` is the whole life of one execution, the same for a declared node and
for one item of a map:

1. **admit** — nothing starts once the run has ended; a slow reader holds it back
   (``wait_writable``) before it starts;
2. **start** — its ``start`` event (and, for a declared node, the plan marks it running
   and ``nodes_run`` counts it); it counts against ``max_total_nodes``;
3. **run its kind** — looked up in the runner's kind table (``branch``, ``map``), else
   :func:`execute`: resolve ``input_map``, call the kind's executor — through
   :func:`~a2e_host.chains.recovery.run_recovering` when the node has recovery fields
   (retries, a timeout per attempt, a fallback, the step cache: PROTOCOL.md §5
   Recovery), whose attempts are ``kind: "progress"`` events between ``start`` and the
   terminal event;
4. **check the output** — held to ``max_output_bytes`` and counted as kept by the request;
5. **end** — exactly one terminal event: ``done`` with the output, or ``error`` with the
   failure's message; if the run ended meanwhile, the result is discarded and the
   ``error`` says why the run ended. Cancellation sends that ``error`` and propagates.
   A node with recovery fields' terminal event carries its report as ``data``
   (``attempts``, ``errors``, ``fallback_used``, …); every other node's ``data`` is
   ``{}``, as it always was.

It returns an :class:`~a2e_host.chains.outcome.Outcome`; the caller applies it (a node to
the plan, an item to its map).

In a run resumed after a restart (PROTOCOL.md §5 Resume), a map item whose terminal event
is on the log is restored from it (no event, nothing runs); a node or item that was in
flight sends no second ``start``: it runs again when
:meth:`~a2e_host.chains.resume.Resumption.may_rerun` allows it, else ends at once with an
``interrupted`` error; either way its terminal event's ``data`` says ``resumed: true``.

It sees the run through :class:`~a2e_host.chains.run_state.RunState` and must not import
the scheduler (which imports it). :data:`~a2e_host.chains.run_state.KindRunner` is
re-exported here.
"""

from __future__ import annotations

from typing import Any

import anyio

from ..errors import chain_failure_of
from ..exceptions import ChainError, NodeError
from . import kinds
from .evaluation import evaluate, resolve_input
from .expressions import is_truthy
from .interpreter import ContextView
from .nodes import NodeContext
from .outcome import LATE, NOT_STARTED, Outcome, OutcomeKind
from .recovery import attempt_deadline, run_recovering
from .recovery_policy import Report
from .reports import NodeReports
from .resume import Record, failure_error, interrupted_failure
from .run_state import KindRunner, RunState
from .subchains import subchain_runner
from .validation import PlanNode

__all__ = ["STOPPED_ITEM", "KindRunner", "execute", "run_attempt", "run_branch"]

_DONE, _FAILED = OutcomeKind.DONE, OutcomeKind.FAILED  # enum lookups cost ~0.1 µs each

STOPPED_ITEM = Outcome(OutcomeKind.LATE)
"""A map item a resumed run's log shows stopped, not failed (another item's failure, or
the run's end, cancelled it): the map passes over it; the failure that stopped it, on the
log too, fails the map as it did (PROTOCOL.md §5 Resume)."""

async def run_attempt(
    run: RunState, shown: str, pnode: PlanNode, context: ContextView, *, item: bool = False
) -> Outcome:
    """Run one node (or, with ``item``, one map item of template ``pnode``) once.

    Args:
        run: the run it belongs to.
        shown: its display id (``t[3]`` for a map item, ``outer/inner`` in a skill).
        pnode: the node, or the map's template for an item.
        context: its view of the chain context (PROTOCOL.md §3).
        item: a map item rather than a declared node: the plan does not track it and a
            stop not caused by the run ending means another item failed.

    Returns:
        The :class:`~a2e_host.chains.outcome.Outcome`; its terminal event, if it started,
        has been sent.

    Raises:
        anyio's cancellation exception: re-raised after the ``error`` event; no other
        exception escapes (a failure is an Outcome).
    """
    if run.end is not None:
        return NOT_STARTED
    config = run.config
    wait_writable = config.wait_writable
    if wait_writable is not None:
        await wait_writable()
        if run.end is not None:
            return NOT_STARTED
    resume = config.resume
    resumed = False
    if resume is not None:
        record = resume.log.records.get(shown) if item else None
        if record is not None and record.phase != "skip":
            return _restored(run, shown, pnode, record)
        resumed = resume.log.in_flight.pop(shown, None) is not None
        if resumed:
            resume.resumed.add(shown)
            if not resume.may_rerun(pnode):
                return _interrupted(run, shown, pnode, item)
    if not item:
        run.node_started(pnode.index)
    run.running[shown] = False
    recovery = pnode.recovery
    if recovery is not None:
        run.reports[shown] = Report(pnode.node.name)
    if not resumed:
        if pnode.notice is None:
            run.events.send(shown, "start")
        else:  # a deprecated skill version: its warning travels in the start event
            run.events.send_data(shown, "start", pnode.notice)
    if run.debug:
        run.log.debug("node started", node_id=shown, kind=pnode.kind)
    budget = run.budget
    node_id = pnode.node_id
    kind = pnode.kind
    size = 0
    try:
        if config.hold_start is not None and not resumed:
            held = config.hold_start(pnode)  # a durable run: its start stored first
            if held is not None:
                await held
        budget.count_nodes(1, shown, node_id)
        output, taken = await run.kind_runners.get(kind, execute)(run, shown, pnode, context)
        if pnode.template_index is None:  # a map counts its items' outputs as they arrive
            size = budget.keep_output(output, shown, node_id)
            if size < 0:
                size = await budget.keep_large_output(output, shown, node_id)
    except anyio.get_cancelled_exc_class():
        run.terminal_error(shown, run.cancel_message(item=item))
        run.log.debug("node cancelled", node_id=shown)
        raise
    except Exception as exc:  # noqa: BLE001 — every node failure becomes data
        failure = chain_failure_of(exc, node_id=node_id)
        if not isinstance(exc, ChainError):
            run.log.warning("node raised", node_id=shown, exc_info=exc)
        run.terminal_error(shown, failure.message, failure)
        run.log.debug("node failed", node_id=shown, code=failure.code,
                      on_error=pnode.on_error, error=failure.message)
        return Outcome(_FAILED, error=exc, failure=failure)
    if run.end is not None and run.interrupted:
        # the run ended while this ran: its result is never applied
        budget.release(size)
        run.terminal_error(shown, run.cancel_message(item=item))
        return LATE
    run.running[shown] = True
    if recovery is None and not resumed:
        run.events.send(shown, "done", output=output)
    else:
        data: dict[str, Any] = {}
        if recovery is not None:
            report = run.reports.pop(shown)
            if report.keep is not None:
                report.keep(output, size)
            data = report.data(True)
        if resumed:
            data["resumed"] = True
        run.events.send_data(shown, "done", data, output=output)
    if run.debug:
        run.log.debug("node done", node_id=shown)
    return Outcome(_DONE, output, size, taken)


def _restored(run: RunState, shown: str, pnode: PlanNode, record: Record) -> Outcome:
    """A map item whose terminal event is on a resumed run's log: its outcome as
    recorded, counted in the budgets as when it ran; no event, nothing runs."""
    if record.phase == "error":
        if record.failure is None:
            return STOPPED_ITEM
        return Outcome(_FAILED, error=failure_error(record.failure), failure=record.failure)
    run.budget.restore(1, record.size)
    return Outcome(_DONE, record.output, record.size)


def _interrupted(run: RunState, shown: str, pnode: PlanNode, item: bool) -> Outcome:
    """An in-flight node or item that may not run again: its ``error`` (code
    ``interrupted``, ``data.resumed``) now, and the failure its ``on_error`` decides."""
    if not item:
        run.node_started(pnode.index)
    run.running[shown] = False
    failure = interrupted_failure(shown, pnode.node_id)
    run.terminal_error(shown, failure.message, failure)
    run.log.info("node interrupted by the restart", node_id=shown)
    return Outcome(_FAILED, error=failure_error(failure), failure=failure)


async def execute(
    run: RunState, shown: str, pnode: PlanNode, context: ContextView
) -> tuple[Any, None]:
    """Run a node of an executable kind (``tool``, ``skill``, ``proc``): resolve its
    input, then call the kind's executor (through
    :func:`~a2e_host.chains.recovery.run_recovering` when it has recovery fields).

    Raises:
        NodeError: no executor for the kind on this host; or whatever the executor or
            the input's expressions raise.
    """
    config = run.config
    args = await resolve_input(pnode, context, shown, config.limits)
    executor = config.executors.get(pnode.kind)
    if executor is None:
        raise NodeError(f"node {shown!r}: no executor for kind {pnode.kind!r} on this host")
    reports = NodeReports(run.events, shown)
    ctx = NodeContext(
        node_id=shown,
        chain_id=run.plan.request.chain_id,
        req_id=run.plan.request.id,
        depth=run.depth,
        granted=config.granted,
        max_output_bytes=run.limits.max_output_bytes,
        limits=config.limits,
        run_subchain=(
            subchain_runner(run, shown) if pnode.kind in kinds.NODE_KINDS.subchain_kinds
            else None
        ),
        log=run.log,
        run_key=config.run_key,
        deadline=_deadline(run, pnode),
        sink=reports,
    )
    recovery = pnode.recovery
    try:
        if recovery is None:
            return await executor(pnode.node, args, ctx), None
        output = await run_recovering(run, shown, pnode.node, pnode.kind, recovery, executor,
                                      args, ctx)
        return output, None
    finally:
        reports.close()


def _deadline(run: RunState, pnode: PlanNode) -> float | None:
    """When the node must end, ``time.monotonic()`` seconds: the run's deadline, or the
    node's own ``timeout`` from now when that is sooner; None for neither."""
    return attempt_deadline(run.monotonic_deadline, pnode.node.timeout)


async def run_branch(
    run: RunState, shown: str, pnode: PlanNode, context: ContextView
) -> tuple[dict[str, Any], int | None]:
    """Run a ``branch`` node: evaluate its condition; its output is ``{"condition": bool,
    "taken": node_id or ""}`` and it takes the matching side (PROTOCOL.md §4).

    Raises:
        ChainLimitExceeded, NodeError: the condition exceeded a ceiling or failed.
    """
    assert pnode.condition is not None
    value = await evaluate(pnode, "condition", pnode.condition, context, shown, run.config.limits)
    cond = is_truthy(value)
    taken = pnode.true_index if cond else pnode.false_index
    taken_id = run.plan.nodes[taken].node_id if taken is not None else ""
    return {"condition": cond, "taken": taken_id}, taken
