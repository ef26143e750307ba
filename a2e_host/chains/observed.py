"""Runs started by something other than a ``chain/req`` (a ``skill/call``), observed like
one: a span around the run when tracing is on, so its nodes' spans have a parent.

Layer: chains (public API for plugins: ``a2e_host.chains.*``). Source: README
"Observability".
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from ..telemetry import chain_spans, tracing
from .outcome import RunResult

__all__ = ["observed_run"]


async def observed_run(running: Awaitable[RunResult], span_name: str,
                       attributes: dict[str, Any]) -> RunResult:
    """Await ``running``; with tracing on, inside a span ``span_name`` carrying
    ``attributes`` and the run's outcome. With tracing off it is awaited as it is.

    Args:
        running: the run (e.g. ``ChainRunner.run(...)``), not yet awaited.
        span_name: the span's name (``a2e.skill.call``).
        attributes: ``a2e.req_id``, ``a2e.tool.name`` and the like (None values left out).

    Returns:
        The run's result.
    """
    if not tracing.ENABLED:
        return await running
    return await chain_spans.traced_run(span_name, attributes, running)
