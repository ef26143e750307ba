"""A ``map`` node: its template run once per item, on a bounded pool of item workers.

Layer: runtime (anyio). Source: PROTOCOL.md §4 (map), §5 (map items' events and
errors), §6 (``max_map_items``, ``max_map_concurrency``, ``max_output_bytes``,
``max_total_nodes``).

Each item is one :func:`~a2e_host.chains.attempt.run_attempt` of the template, with
``item``, ``_item`` and ``index`` in its context. A map has one item worker of its own
and takes further ones (up to ``max_map_concurrency``) from the request's spare item
slots, so a 100,000-item map never holds more than that many tasks. The first item that
fails (unless the template's ``on_error: skip`` makes it a null) stops the others and
fails the map (:func:`~a2e_host.chains.outcome.map_failure`); so does the map's own output
once it is sure to pass ``max_output_bytes``.

It sees the run through :class:`~a2e_host.chains.run_state.RunState` and must not import
the scheduler (which imports it).
"""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel

from ..codec import json_kind
from ..exceptions import NodeError
from ..telemetry import chain_spans
from .attempt import STOPPED_ITEM, run_attempt
from .evaluation import evaluate
from .interpreter import ContextView
from .outcome import OutcomeKind, item_is_skipped, map_failure
from .run_state import RunState
from .validation import PlanNode

__all__ = ["run_map"]

_YIELD_EVERY = 64  # items an item worker runs before it yields to the event loop
_DONE = OutcomeKind.DONE  # an enum lookup costs ~0.1 µs; this one runs per item


async def run_map(
    run: RunState, shown: str, pnode: PlanNode, context: ContextView
) -> tuple[list[Any], None]:
    """Run a ``map`` node: its output is the list of its items' outputs, in item order.

    Raises:
        NodeError: ``items_path`` is not a list, or an item failed.
        ChainLimitExceeded: ``max_map_items``, ``max_total_nodes``, the map's
            ``max_output_bytes``, or an item's ceiling (``details["index"]`` names it).
    """
    assert pnode.items_path is not None and pnode.template_index is not None
    limits = run.limits
    budget = run.budget
    items = await evaluate(pnode, "items_path", pnode.items_path, context, shown,
                           run.config.limits)
    if not isinstance(items, list):
        raise NodeError(
            f"map node {shown!r}: items_path {pnode.items_path.text!r} gave "
            f"{json_kind(items)}, not a list",
            node_id=pnode.node_id,
            details={"field": "items_path", "got": json_kind(items)},
        )
    n = len(items)
    if n > limits.max_map_items:
        budget.refuse(
            "max_map_items",
            n,
            f"map node {shown!r} has {n} items, over max_map_items {limits.max_map_items}",
            node_id=pnode.node_id,
        )
    if n == 0:
        return [], None
    request = budget.request
    if request.nodes + n > limits.max_total_nodes:  # certain to overflow
        budget.count_nodes(n, shown, pnode.node_id, items=True)
    template = run.plan.nodes[pnode.template_index]
    results: list[Any] = [None] * n
    next_item = 0
    failure: list[tuple[int, BaseException]] = []
    kept = 0  # bytes of item outputs counted in the request's budget
    # the map's output so far: brackets, commas and the items finished (a lower bound)
    out_size = n + 1
    out_cap = limits.max_output_bytes
    prefix = f"{run.prefix}{template.node_id}["
    shared = run.context
    attempt = chain_spans.item_runner(run_attempt)  # run_attempt when unobserved

    async def item_worker(scope: anyio.CancelScope, borrowed: bool) -> None:
        try:
            await items_loop(scope)
        finally:
            if borrowed:
                request.spare_items += 1

    async def items_loop(scope: anyio.CancelScope) -> None:
        nonlocal next_item, kept, out_size
        ran = 0
        while next_item < n and not failure and run.end is None:
            i = next_item
            next_item += 1
            item = items[i]
            own = {"item": item, "_item": item, "index": i, "output": None}
            outcome = await attempt(
                run, f"{prefix}{i}]", template, ContextView(shared, own), item=True
            )
            if outcome.kind is _DONE:
                results[i] = outcome.output
                kept += outcome.size
                out_size += outcome.size
            elif outcome is STOPPED_ITEM:  # resumed: stopped by another item's failure
                out_size += 4
            else:
                exc = outcome.error or NodeError(run.cancel_message(item=True))
                if item_is_skipped(template.on_error, exc):
                    results[i] = None
                    out_size += 4  # null
                else:
                    failure.append((i, exc))
                    scope.cancel()
                    return
            if out_size > out_cap:  # the map's output is sure to be refused: now
                refused = budget.limit_error(
                    "max_output_bytes",
                    out_size,
                    f"map node {shown!r} output would be at least {out_size} bytes "
                    f"with item {i}, over max_output_bytes {out_cap}",
                    node_id=pnode.node_id,
                )
                if refused is not None:
                    failure.append((i, refused))
                    scope.cancel()
                    return
            ran += 1
            if ran % _YIELD_EVERY == 0:
                await anyio.lowlevel.checkpoint()

    try:
        with anyio.CancelScope() as scope:
            async with anyio.create_task_group() as tg:
                tg.start_soon(item_worker, scope, False)  # this map's own item worker
                for _ in range(min(n, limits.max_map_concurrency) - 1):
                    if request.spare_items <= 0:
                        break
                    request.spare_items -= 1
                    tg.start_soon(item_worker, scope, True)
    except BaseException:
        budget.release(kept)
        raise
    if failure:
        budget.release(kept)  # the items' outputs are dropped with the map's failure
        i, exc = failure[0]
        raise map_failure(exc, i, shown, pnode.node_id)
    return results, None
