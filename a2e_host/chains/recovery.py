"""A node's attempts: retries with backoff, a timeout per attempt, a fallback tool, and
the step cache.

Layer: runtime (anyio). Source: PROTOCOL.md §5 Recovery, §6 (``max_attempts``).

:func:`run_recovering` is what :func:`~a2e_host.chains.attempt.execute` calls, once the
input is resolved, for a node whose plan has a :class:`~a2e_host.chains.recovery_policy.
Recovery` (a node without one calls its executor directly: the hot path asks one
attribute). It stays inside the one node lifecycle,
:func:`~a2e_host.chains.attempt.run_attempt`, which sends the node's ``start`` and its
one terminal event; in between, this module sends a ``kind: "progress"`` event (phase
``start``) for each failed attempt that is tried again and for the switch to the
fallback, and fills the node's :class:`~a2e_host.chains.recovery_policy.Report`, which
the terminal event carries as ``data``.

1. **cache** — when asked and the tool is pure (``cacheable``), a kept output for the
   same tool, version and input answers at once (``cache: "hit"``); after a miss, the
   attempt's output is kept once the node's lifecycle accepted it (``Report.keep``);
2. **attempts** — the executor is called with the resolved input, each call within the
   node's ``timeout`` (a :class:`~a2e_host.exceptions.NodeTimeout`); a failure is tried
   again while attempts are left, :func:`~a2e_host.chains.recovery_policy.may_retry`
   allows it, and the wait (tenacity's exponential backoff, capped, with full or no
   jitter) ends before the chain's deadline;
3. **fallback** — when every attempt failed (not for a ceiling), the fallback tool runs
   once with the same input, validated against its own schema by its own ``invoke``.

Waits go through the run's :class:`~a2e_host.chains.run_state.Clock`, so tests measure
them without sleeping. It sees the run through :class:`~a2e_host.chains.run_state.
RunState` and must not import the scheduler or the attempt module (which imports it).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import anyio
import msgspec
import tenacity

from .. import secrets
from ..exceptions import ChainError, ChainLimitExceeded, NodeTimeout
from . import kinds
from .messages import ChainNode, RetryPolicy
from .nodes import Executor, NodeContext
from .recovery_policy import Recovery, is_guarded, may_retry, progress_data
from .reports import NodeReports
from .run_state import RunState
from .secret_refs import has_secret_refs
from .step_cache import CacheKey

__all__ = ["backoff", "run_recovering"]

_RETRYING = tenacity.Retrying()  # the owner tenacity's per-attempt state must name


def backoff(retry: RetryPolicy, attempt: int, uniform: Callable[[float, float], float]) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1-based) before the next one.

    ``min(max_delay, interval * backoff_rate ** (attempt - 1))`` (tenacity's
    ``wait_exponential``); with ``jitter: "full"`` a uniform draw between 0 and that
    (AWS's "full jitter", tenacity's ``wait_random_exponential``), drawn with
    ``uniform`` so a test can fix it. Rounded to milliseconds, as the progress event
    reports it.
    """
    state = tenacity.RetryCallState(_RETRYING, None, (), {})
    state.attempt_number = attempt
    wait = tenacity.wait_exponential(
        multiplier=retry.interval, max=retry.max_delay, exp_base=retry.backoff_rate
    )
    high = float(wait(state))
    return round(uniform(0.0, high) if retry.jitter == "full" else high, 3)


async def run_recovering(
    run: RunState,
    shown: str,
    node: ChainNode,
    kind: str,
    recovery: Recovery,
    executor: Executor,
    args: dict[str, Any],
    ctx: NodeContext,
) -> Any:
    """Run a node's (or map item's) attempts as its :class:`Recovery` says.

    Args:
        run: the run it belongs to; its report is ``run.reports[shown]``.
        shown: its display id.
        node: the node (a map item's template).
        kind: its kind (``tool``, ``skill`` or ``proc``).
        recovery: its recovery fields.
        executor: its kind's executor.
        args: its resolved input (each attempt gets a shallow copy).
        ctx: what the executor is told of the call.

    Returns:
        The output of the attempt (or fallback, or cache entry) that produced it.

    Raises:
        The last failure: the fallback's when it ran, else the last attempt's (a
        :class:`~a2e_host.exceptions.NodeTimeout` when it ran out of time).
        Cancellation propagates.
    """
    report = run.reports[shown]
    config = run.config
    spec = kinds.NODE_KINDS.get(kind)
    tool = None
    if config.tool_of is not None and spec is not None and spec.registry == "tool":
        tool = config.tool_of(node.name)
    key: CacheKey | None = None
    cache = config.step_cache
    if recovery.cache:
        if (cache is None or not cache.enabled or tool is None or not tool.cacheable
                # a key would not hold the value; with no secret registered in the
                # process no reference can have passed validation, so no walk
                or (secrets.active_redactor is not None and has_secret_refs(node.input))):
            report.cache = "off"
        else:
            key = cache.key(node.name, tool.version, args)
            if key is None:
                report.cache = "off"
            else:
                hit, output = cache.get(key)
                report.cache = "hit" if hit else "miss"
                if hit:
                    return output
    guarded = (spec is not None and spec.unknown_effects) or (
        tool is not None and is_guarded(tool.side_effects, tool.idempotent))
    retry = recovery.retry
    of = recovery.max_attempts
    clock = config.clock
    attempt = 0
    while True:
        attempt += 1
        report.attempts = attempt
        try:
            output = await _call(executor, node, args, ctx, recovery.timeout, shown,
                                 run.monotonic_deadline)
        except Exception as exc:  # noqa: BLE001 — a failed attempt is data until the last
            report.failed(attempt, node.name, exc)
            if not isinstance(exc, ChainError):
                run.log.warning("node raised", node_id=shown, attempt=attempt, exc_info=exc)
            if retry is None or attempt >= of or not may_retry(exc, retry, guarded=guarded):
                failure: Exception = exc
                break
            wait = backoff(retry, attempt, clock.uniform)
            if clock.now() + wait >= run.deadline:
                failure = exc  # the next attempt could not start before the chain ends
                break
            run.log.info("node retried", node_id=shown, attempt=attempt, of=of,
                         retry_in_s=wait, error=str(exc))
            run.events.send_data(shown, "start", progress_data(attempt, of, exc, wait),
                                 kind="progress")
            await clock.sleep(wait)
            continue
        if key is not None and cache is not None:
            report.keep = partial(cache.put, key)  # once the output passed its checks
        return output
    name = recovery.fallback
    if not name or isinstance(failure, ChainLimitExceeded):
        raise failure
    run.events.send_data(shown, "start", progress_data(attempt, of, failure, 0.0, name),
                         kind="progress")
    report.fallback_used = True
    run.log.info("node falls back", node_id=shown, fallback=name, error=str(failure))
    try:
        output = await _call(executor, msgspec.structs.replace(node, name=name), args, ctx,
                             recovery.timeout, shown, run.monotonic_deadline)
    except Exception as exc:
        report.failed(1, name, exc)
        raise
    report.tool = name
    return output


async def _call(
    executor: Executor,
    node: ChainNode,
    args: dict[str, Any],
    ctx: NodeContext,
    limit: float | None,
    shown: str,
    run_deadline: float | None = None,
) -> Any:
    """One attempt: the executor on a copy of ``args``, within ``limit`` seconds (the
    node's ``timeout``; None for none). The tool sees this attempt's deadline
    (:func:`attempt_deadline`), not the first attempt's: each attempt has the whole
    ``limit``; and reports through this attempt's sink, closed when it ends (the cap
    stays the node execution's).

    Raises:
        NodeTimeout: ``limit`` passed first; whatever the executor raises.
    """
    sink = ctx.sink.attempt() if isinstance(ctx.sink, NodeReports) else None
    ctx = dataclasses.replace(ctx, deadline=attempt_deadline(run_deadline, limit),
                              sink=sink or ctx.sink)
    try:
        if limit is None:
            return await executor(node, dict(args), ctx)
        with anyio.move_on_after(limit):
            return await executor(node, dict(args), ctx)
    finally:
        if sink is not None:
            sink.close()  # an abandoned worker thread reports no more
    raise NodeTimeout(
        f"node {shown!r} timed out after {limit:g} s (its timeout); raise the node's "
        "timeout or make the work smaller"
    )


def attempt_deadline(run_deadline: float | None, limit: float | None) -> float | None:
    """When an attempt starting now must end, ``time.monotonic()`` seconds: the run's
    deadline, or ``limit`` (the node's ``timeout``, per attempt) from now when that is
    sooner; None for neither."""
    if limit is None:
        return run_deadline
    own = time.monotonic() + limit
    return own if run_deadline is None or own < run_deadline else run_deadline
