"""Bounding what a tool builds by the node's ``max_output_bytes`` (PROTOCOL.md §6), before
it builds it, and keeping large work off the event loop.

The scheduler measures every output against ``max_output_bytes`` once the tool returns;
a tool that can return more than it was given (``"x" * n``, a template repeating a
placeholder, an indented dump) must not build a gigabyte first only to have it refused.
Such tools compute their output's size (or a lower bound of it) from their input, and call
:func:`refuse_output` when it is over :func:`output_cap`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any, NoReturn, TypeVar

import anyio.to_thread

from a2e_host.chains.nodes import current_node
from a2e_host.exceptions import ChainLimitExceeded
from a2e_host.limits import Limits

__all__ = ["INLINE_CHARS", "output_cap", "refuse_output", "offload"]

INLINE_CHARS = 64 * 1024
"""Input characters under which a tool's linear work runs on the event loop (well under a
millisecond); above, it runs in a worker thread."""

_T = TypeVar("_T")


def output_cap() -> int:
    """The running node's ``max_output_bytes`` (int bytes); the host default outside a
    node (a tool invoked directly)."""
    ctx = current_node.get()
    return ctx.max_output_bytes if ctx is not None else Limits().max_output_bytes


def refuse_output(tool: str, requested: int, what: str, *, at_least: bool = False) -> NoReturn:
    """Refuse an output of ``requested`` bytes as ``chain_limit`` naming ``max_output_bytes``.

    Args:
        tool: the tool's name.
        requested: the output's size in bytes, or a lower bound of it (``at_least``).
        what: what would be that big, e.g. ``"the text"``.

    Raises:
        ChainLimitExceeded: always; ``details`` are ``{ceiling, scope, limit, requested}``.
    """
    ctx = current_node.get()
    cap = output_cap()
    scope = "host"
    if ctx is not None and ctx.limits is not None:
        refusal = ctx.limits.refusal("max_output_bytes", max(requested, cap + 1))
        if refusal is not None:
            scope = refusal.details["scope"]
    where = f"node {ctx.node_id!r}: " if ctx is not None else ""
    size = f"at least {requested}" if at_least else str(requested)
    raise ChainLimitExceeded(
        f"{where}tool {tool!r}: {what} would be {size} bytes, over max_output_bytes {cap} "
        f"({scope} scope); ask for less",
        details={
            "ceiling": "max_output_bytes",
            "scope": scope,
            "limit": cap,
            "requested": requested,
        },
    )


async def offload(size: int, fn: Callable[..., _T], *args: Any) -> _T:
    """``fn(*args)``: on the event loop when ``size`` (the input's characters or
    elements) is under :data:`INLINE_CHARS`, else in a worker thread (abandoned when
    cancelled)."""
    if size < INLINE_CHARS:
        return fn(*args)
    return await anyio.to_thread.run_sync(partial(fn, *args), abandon_on_cancel=True)
