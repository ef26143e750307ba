"""Evaluating a node's expressions at run time, within the session's expression ceilings.

Layer: runtime (anyio: a long evaluation moves to a worker thread). The expressions were
compiled at validation (:mod:`a2e_host.chains.expressions`); this module runs them over a
node's context: its ``input_map`` (:func:`resolve_input`), a branch's ``condition`` and a
map's ``items_path`` (:func:`evaluate`). Source: PROTOCOL.md §3, §6.

A dotted path is a few dict lookups, done on the loop. Anything else first runs on the
event loop for at most ``_INLINE_STEPS`` steps; past that it runs again, under the full
budget, in a worker thread on a snapshot of the context, and is told to stop the moment
its node is cancelled (chain timeout, cancel, abort). Hostile chains can hold at most
``_EXPRESSION_THREADS`` threads per event loop, never every worker thread of the host.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import jmespath.exceptions

from ..exceptions import ChainLimitExceeded, NodeError
from ..limits import SessionLimits
from ..runtime.limiters import loop_limiter
from .expressions import Expression, clip
from .interpreter import (
    Budget,
    ContextView,
    EvaluationSliceExhausted,
    ExpressionBudgetExceeded,
)
from .validation import PlanNode

__all__ = ["evaluate", "resolve_input"]

_INLINE_STEPS = 4096  # expression steps taken on the event loop (~1-2 ms) before a thread
_EXPRESSION_THREADS = 4  # long expression evaluations running at once (per event loop)
_EVALUATION_ERRORS = (
    jmespath.exceptions.JMESPathError, TypeError, ValueError, KeyError, RecursionError,
    ArithmeticError,  # avg() of a 401-digit integer overflows a float
)
_expression_limiter: anyio.lowlevel.RunVar[anyio.CapacityLimiter] = anyio.lowlevel.RunVar(
    "a2e_host_expression_limiter"
)


def _expression_threads() -> anyio.CapacityLimiter:
    """The event loop's own limiter for expression threads."""
    return loop_limiter(_expression_limiter, _EXPRESSION_THREADS)


@functools.lru_cache(maxsize=64)
def _inline_budget(max_steps: int, max_bytes: int) -> Budget:
    return Budget(max_steps=max_steps, max_bytes=max_bytes, slice_steps=_INLINE_STEPS)


async def evaluate(
    pnode: PlanNode,
    field: str,
    expr: Expression,
    context: ContextView,
    shown: str,
    scoped: SessionLimits,
) -> Any:
    """Evaluate one of ``pnode``'s expressions under the session's expression ceilings.

    Args:
        pnode: the node whose expression it is.
        field: where it was written (``input_map.<key>``, ``condition``, ``items_path``).
        expr: the compiled expression.
        context: the node's view of the chain context (PROTOCOL.md §3).
        shown: the node's display id, for messages.
        scoped: the session's ceilings (``max_expression_steps``,
            ``max_expression_bytes``).

    Returns:
        The expression's JSON value.

    Raises:
        ChainLimitExceeded: ``max_expression_steps`` / ``max_expression_bytes``.
        NodeError: the expression failed on these values.
    """
    if expr.path is not None:
        return expr.search(context)
    limits = scoped.effective
    try:
        try:
            return expr.search(
                context,
                _inline_budget(limits.max_expression_steps, limits.max_expression_bytes),
            )
        except EvaluationSliceExhausted:
            pass
        cancelled = threading.Event()
        budget = Budget(
            max_steps=limits.max_expression_steps,
            max_bytes=limits.max_expression_bytes,
            cancelled=cancelled,
        )
        try:
            return await anyio.to_thread.run_sync(
                expr.search,
                context.snapshot(),
                budget,
                abandon_on_cancel=True,
                limiter=_expression_threads(),
            )
        finally:
            cancelled.set()  # an abandoned evaluation stops at its next check
    except ExpressionBudgetExceeded as exc:
        raise _expression_refusal(pnode, field, expr, exc, shown, scoped) from None
    except _EVALUATION_ERRORS as exc:
        reason = "it nests too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise NodeError(
            f"node {shown!r} field {field!r}: expression {clip(expr.text)} failed: {reason}",
            node_id=pnode.node_id,
            details={"field": field, "expression": expr.text},
        ) from None


def _expression_refusal(
    pnode: PlanNode,
    field: str,
    expr: Expression,
    exc: ExpressionBudgetExceeded,
    shown: str,
    scoped: SessionLimits,
) -> ChainLimitExceeded:
    refused = scoped.refusal(exc.ceiling, exc.requested, node_id=pnode.node_id)
    details: dict[str, Any] = (
        dict(refused.details) if refused is not None else
        {"ceiling": exc.ceiling, "scope": "host", "limit": exc.limit,
         "requested": exc.requested}
    )
    scope, limit = details["scope"], details["limit"]
    if exc.ceiling == "max_expression_steps":
        amount, did = f"{limit} steps", f"took more than {limit} steps"
    else:
        amount, did = f"{limit} bytes", f"built a value of at least {exc.requested} bytes"
    how = (
        "ask for more in handshake/req limits, up to the host's"
        if scope == "session"
        else f"A2E_{exc.ceiling.upper()} or [limits] {exc.ceiling} on the host"
    )
    return ChainLimitExceeded(
        f"node {shown!r} field {field!r}: expression {clip(expr.text)} exceeded "
        f"{exc.ceiling} ({amount} at {scope} scope): it {did}; simplify it or raise the "
        f"ceiling ({how})",
        node_id=pnode.node_id,
        details={**details, "field": field},
    )


async def resolve_input(
    pnode: PlanNode, context: ContextView, shown: str, scoped: SessionLimits
) -> dict[str, Any]:
    """The arguments a node runs with: its static ``input``, then each ``input_map``
    expression's value over ``context`` (PROTOCOL.md §3).

    Raises:
        ChainLimitExceeded, NodeError: as :func:`evaluate`.
    """
    args = dict(pnode.node.input)
    for key, expr in pnode.input_map:
        if expr.path is not None:
            args[key] = expr.search(context)  # the dotted fast path, no budget needed
        else:
            args[key] = await evaluate(pnode, f"input_map.{key}", expr, context, shown, scoped)
    return args
