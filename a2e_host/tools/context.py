"""The running tool's context: :func:`context` and :func:`report` (PROTOCOL.md §5, §11).

A tool function sees only its input; while it runs as a ``tool`` node or a direct
``tool/call/req``, :func:`context` gives it the node's
:class:`~a2e_host.chains.nodes.NodeContext`: its ``idempotency_key`` (stable across
attempts and a resume), ``deadline`` (``time.monotonic()`` seconds, or None),
``max_output_bytes``, ``report(kind, data)`` and, for a blocking tool in its worker
thread, ``cancelled`` / ``wait_cancelled(seconds)`` / ``check_cancelled()``. Outside a
node (a tool called as a plain function, a test) :func:`context` is None and
:func:`report` does nothing, so a tool that reports keeps working anywhere; tools that
never call them are unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..chains.nodes import (
    MAX_REPORT_BYTES,
    MAX_REPORTS,
    REPORT_KINDS,
    NodeContext,
    current_node,
)

__all__ = ["MAX_REPORT_BYTES", "MAX_REPORTS", "REPORT_KINDS", "NodeContext", "context", "report"]


def context() -> NodeContext | None:
    """The :class:`~a2e_host.chains.nodes.NodeContext` of the tool running in this task
    (or its worker thread), None outside one."""
    return current_node.get()


def report(kind: str, data: Mapping[str, Any] | None = None) -> bool:
    """Report ``kind`` with ``data`` from the running tool (see
    :meth:`~a2e_host.chains.nodes.NodeContext.report`): e.g.
    ``report("progress", {"pct": 40, "message": "4 of 10 files"})``.

    Returns:
        Whether it was sent: False outside a node, past :data:`MAX_REPORTS` per node
        execution, over :data:`MAX_REPORT_BYTES`, or after the node ended.

    Raises:
        ValueError: an unknown ``kind`` or ``data`` that is not a JSON-able mapping.
    """
    ctx = current_node.get()
    return ctx.report(kind, data) if ctx is not None else False
