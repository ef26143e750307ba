"""The chain engine's hooks: a span per chain request, per node, per sampled map item;
node durations for the metrics.

Layer: runtime support (no anyio of its own; the hooks run on the event loop, in the
task that runs the node). Source: PROTOCOL.md §5 Trace context; README "Observability".

The engine asks once per run (:func:`attempt_runner`), once per map
(:func:`item_runner`) and once per request (:func:`chain_span_needed`) whether anything
is observed; when nothing is, it gets its own plain functions back and no hook runs per
node. When tracing is on:

* the **chain** span (``a2e.chain``) is a child of the agent's ``trace_context`` when it
  sent a valid one, else the root of a new trace;
* each started **node** gets a span (``a2e.node``), current while the node runs, so a
  tool (in the loop or a worker thread), a skill's sub-chain (its nodes' spans are
  children of the skill node's) and a proc child (``TRACEPARENT``) see it;
* **map items** (``a2e.map.item``): the first :data:`MAP_ITEM_SPANS` items of each map
  get a live span each; of the later ones only a failed item gets a span (made when it
  ends, with its real start time), so a 100,000-item map costs a handful of spans while
  its failures stay visible.

Attributes (all set through :func:`~a2e_host.telemetry.tracing.set_run_attributes`):
``a2e.req_id``, ``a2e.chain_id`` (chain and nodes), ``a2e.node_id`` (the display id:
``outer/inner``, ``t[3]``), ``a2e.node.kind``, ``a2e.tool.name`` (the node's ``name``:
tool, skill or executable), ``a2e.outcome`` (``done``, ``error``, ``cancelled``,
``not_started``; a chain: ``ok`` or ``error``), ``a2e.error.code``, ``a2e.attempts``
(executable kinds), ``a2e.map.index`` (items), ``a2e.nodes_run`` (chain).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..chains.kinds import NODE_KINDS
from . import metrics, tracing

if TYPE_CHECKING:
    from ..chains.context_view import ContextView
    from ..chains.messages import ChainRequest, ChainResponse
    from ..chains.outcome import Outcome, RunResult
    from ..chains.recovery_policy import Report
    from ..chains.run_state import RunState
    from ..chains.validation import PlanNode

__all__ = [
    "MAP_ITEM_SPANS", "AttemptFn", "attempt_runner", "chain_span_needed", "item_runner",
    "reports_for_run", "traced_chain", "traced_run",
]

MAP_ITEM_SPANS = 10
"""Map items per map that get a live span (the first ones, by index); a later item gets
a span only when it fails (docs/DECISIONS.md "Traces")."""

AttemptFn = Callable[..., Awaitable["Outcome"]]
""":func:`~a2e_host.chains.attempt.run_attempt`'s shape:
``(run, shown, pnode, context, *, item=False) -> Outcome``."""

_EXECUTABLE = frozenset(s.name for s in NODE_KINDS.specs.values() if s.executed)
"""Kinds that run an executor (a tool, skill or executable): their spans name it."""


def observed() -> bool:
    """Whether any node hook is wanted: tracing on, or node timing for the metrics."""
    return tracing.ENABLED or metrics.NODE_TIMING


def chain_span_needed() -> bool:
    """Whether a chain request gets a span (asked once per request)."""
    return tracing.ENABLED


class _KeptReports(dict[str, "Report"]):
    """A run's recovery reports that remember the last one taken per node, so the node's
    span can carry its ``attempts`` after the terminal event took the report."""

    __slots__ = ("taken",)

    def __init__(self) -> None:
        super().__init__()
        self.taken: dict[str, Report] = {}

    def pop(self, key: str, *default: Any) -> Any:
        report = dict.pop(self, key, *default)
        if report is not None:
            self.taken[key] = report
        return report


def reports_for_run() -> dict[str, Report]:
    """The ``reports`` table a run starts with: a plain dict unless tracing is on."""
    return _KeptReports() if tracing.ENABLED else {}


def attempt_runner(run_attempt: AttemptFn) -> AttemptFn:
    """What a run calls to run one node: ``run_attempt`` itself when nothing is observed,
    else ``run_attempt`` inside a node span and/or timed for the metrics."""
    if not observed():
        return run_attempt
    if not tracing.ENABLED:
        return _timed(run_attempt)
    return _traced(run_attempt)


def item_runner(run_attempt: AttemptFn) -> AttemptFn:
    """What one map calls to run each item (made per map: it counts the items it ran).
    ``run_attempt`` itself when nothing is observed."""
    if not observed():
        return run_attempt
    if not tracing.ENABLED:
        return _timed_items(run_attempt)
    live = _traced(run_attempt, span_name="a2e.map.item")
    timing = metrics.NODE_TIMING
    started = 0
    hist: list[float] | None = None

    async def item_attempt(run: RunState, shown: str, pnode: PlanNode, context: ContextView,
                           *, item: bool = False) -> Outcome:
        nonlocal started, hist
        index = started
        started += 1
        if index < MAP_ITEM_SPANS:
            return await live(run, shown, pnode, context, item=item, index=index)
        start_ns = time.time_ns()
        t0 = time.perf_counter()
        outcome = await run_attempt(run, shown, pnode, context, item=item)
        if timing:
            if hist is None:
                hist = metrics.histogram(pnode.kind, pnode.node.name)
            metrics.observe(hist, time.perf_counter() - t0)
        taken = getattr(run.reports, "taken", None)
        if outcome.kind.value != "failed":
            if taken:
                taken.pop(shown, None)  # no span will read its report
        else:
            span = tracing.tracer().start_span("a2e.map.item", start_time=start_ns)
            _end_node_span(span, run, shown, pnode, outcome, index)
        return outcome

    return item_attempt


def _timed(run_attempt: AttemptFn) -> AttemptFn:
    """``run_attempt`` timed for the metrics (an attempt cancelled midway is not counted)."""
    async def timed_attempt(run: RunState, shown: str, pnode: PlanNode, context: ContextView,
                            *, item: bool = False) -> Outcome:
        t0 = time.perf_counter()
        outcome = await run_attempt(run, shown, pnode, context, item=item)
        metrics.node_finished(pnode.kind, pnode.node.name, time.perf_counter() - t0)
        return outcome

    return timed_attempt


def _timed_items(run_attempt: AttemptFn) -> AttemptFn:
    """One map's items timed: they share a template, so their histogram is looked up
    once."""
    hist: list[float] | None = None

    async def timed_item(run: RunState, shown: str, pnode: PlanNode, context: ContextView,
                         *, item: bool = False) -> Outcome:
        nonlocal hist
        t0 = time.perf_counter()
        outcome = await run_attempt(run, shown, pnode, context, item=item)
        if hist is None:
            hist = metrics.histogram(pnode.kind, pnode.node.name)
        metrics.observe(hist, time.perf_counter() - t0)
        return outcome

    return timed_item


def _traced(run_attempt: AttemptFn, span_name: str = "a2e.node") -> Callable[
        ..., Awaitable[Outcome]]:
    from opentelemetry import context as otel_context
    from opentelemetry.trace import set_span_in_context

    tracer = tracing.tracer()
    timing = metrics.NODE_TIMING

    async def traced_attempt(run: RunState, shown: str, pnode: PlanNode,
                             context: ContextView, *, item: bool = False,
                             index: int | None = None) -> Outcome:
        if run.end is not None:  # the run ended: nothing starts, no span
            return await run_attempt(run, shown, pnode, context, item=item)
        span = tracer.start_span(span_name)
        token = otel_context.attach(set_span_in_context(span))
        t0 = time.perf_counter()
        try:
            outcome = await run_attempt(run, shown, pnode, context, item=item)
        except BaseException:  # cancellation: its error event was sent
            tracing.set_run_attributes(span, _node_attributes(run, shown, pnode, index))
            tracing.set_run_attributes(span, {"a2e.outcome": "cancelled"})
            span.end()
            raise
        finally:
            otel_context.detach(token)
            if timing:
                metrics.node_finished(pnode.kind, pnode.node.name, time.perf_counter() - t0)
        _end_node_span(span, run, shown, pnode, outcome, index)
        return outcome

    return traced_attempt


def _node_attributes(run: RunState, shown: str, pnode: PlanNode, index: int | None
                     ) -> dict[str, Any]:
    request = run.plan.request
    kind = pnode.kind
    return {
        "a2e.req_id": request.id,
        "a2e.chain_id": request.chain_id,
        "a2e.node_id": shown,
        "a2e.node.kind": kind,
        "a2e.tool.name": pnode.node.name if kind in _EXECUTABLE else None,
        "a2e.map.index": index,
    }


def _end_node_span(span: Any, run: RunState, shown: str, pnode: PlanNode,
                   outcome: Outcome, index: int | None) -> None:
    attributes = _node_attributes(run, shown, pnode, index)
    kind = outcome.kind.value
    attributes["a2e.outcome"] = {"done": "done", "failed": "error", "late": "cancelled",
                                 "not_started": "not_started"}[kind]
    if pnode.kind in _EXECUTABLE and kind != "not_started":
        taken = getattr(run.reports, "taken", None)
        report = taken.pop(shown, None) if taken else None
        attributes["a2e.attempts"] = report.attempts if report is not None else 1
        if report is not None and report.fallback_used:
            attributes["a2e.fallback_used"] = True
    failure = outcome.failure
    if failure is not None:
        attributes["a2e.error.code"] = failure.code
    tracing.set_run_attributes(span, attributes,
                               error=failure.message if failure is not None else None)
    span.end()


async def traced_chain(request: ChainRequest, running: Awaitable[Any],
                       sent: list[ChainResponse]) -> None:
    """Await ``running`` (the run to its response) inside the request's ``a2e.chain``
    span, a child of the agent's ``trace_context`` (PROTOCOL.md §5 Trace context).

    Args:
        request: the chain request.
        running: the run, not yet awaited (its tasks start inside the span's context).
        sent: where the run puts its one response; read for the span's outcome.
    """
    from opentelemetry import context as otel_context
    from opentelemetry.trace import set_span_in_context

    tc = request.trace_context
    parent = tracing.parent_context(
        None if tc is None else {"traceparent": tc.traceparent, "tracestate": tc.tracestate})
    span = tracing.tracer().start_span("a2e.chain", context=parent)
    tracing.set_run_attributes(span, {
        "a2e.req_id": request.id, "a2e.chain_id": request.chain_id,
        "a2e.nodes": len(request.nodes),
    })
    token = otel_context.attach(set_span_in_context(span))
    try:
        await running
    finally:
        otel_context.detach(token)
        if sent:
            response = sent[0]
            error = response.error
            tracing.set_run_attributes(span, {
                "a2e.outcome": "ok" if response.success else "error",
                "a2e.error.code": error.code if error is not None else None,
                "a2e.nodes_run": response.nodes_run,
            }, error=error.message if error is not None else None)
        span.end()


async def traced_run(span_name: str, attributes: dict[str, Any],
                     running: Awaitable[RunResult]) -> RunResult:
    """Await ``running`` (a run started by something other than a ``chain/req``: a
    ``skill/call``) inside a span ``span_name``, so the run's node spans have a parent.

    Args:
        span_name: e.g. ``a2e.skill.call``.
        attributes: the span's own attributes (``a2e.req_id``, ``a2e.tool.name`` …).
        running: the run, not yet awaited (its tasks start inside the span's context).

    Returns:
        The run's result; its outcome (``ok`` or ``error``, the error code and message)
        is put on the span.
    """
    from opentelemetry import context as otel_context
    from opentelemetry.trace import set_span_in_context

    span = tracing.tracer().start_span(span_name)
    tracing.set_run_attributes(span, attributes)
    token = otel_context.attach(set_span_in_context(span))
    try:
        result = await running
    except BaseException:
        tracing.set_run_attributes(span, {"a2e.outcome": "cancelled"})
        raise
    else:
        error = result.error
        tracing.set_run_attributes(span, {
            "a2e.outcome": "ok" if result.success else "error",
            "a2e.error.code": error.code if error is not None else None,
            "a2e.nodes_run": result.nodes_run,
        }, error=error.message if error is not None else None)
        return result
    finally:
        otel_context.detach(token)
        span.end()
