"""Capacity limiters owned by the running event loop.

Layer: runtime (anyio). Work moved off the event loop (big decodes, long expression
evaluations, validation of big chains) runs on a few threads of its own kind, so one
hostile request can take at most those, never every worker thread of the host.
"""

from __future__ import annotations

import anyio
import anyio.lowlevel

__all__ = ["loop_limiter"]


def loop_limiter(
    var: anyio.lowlevel.RunVar[anyio.CapacityLimiter], size: int
) -> anyio.CapacityLimiter:
    """The limiter ``var`` holds for the running event loop, made with ``size`` tokens the
    first time it is asked for (a :class:`~anyio.lowlevel.RunVar` is per loop, so tests
    that start several loops each get their own)."""
    try:
        return var.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(size)
        var.set(limiter)
        return limiter
