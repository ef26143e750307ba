"""Telling the task's own cancellation from a stray one.

Layer: runtime (anyio). A ``CancelledError`` can reach our code without anyone
cancelling our task: a plugin awaited an asyncio future that something else cancelled
(a client library's request cancelled under it). Such an exception is the plugin's
failure, to be answered like any other; only a real cancellation of the task (one of
our cancel scopes, or the task itself asked to stop) must be let through.
"""

from __future__ import annotations

import asyncio
import math

import anyio

__all__ = ["being_cancelled"]


def being_cancelled() -> bool:
    """Whether the current task is being cancelled: an enclosing cancel scope (not
    behind a shield) was cancelled, or, on asyncio, the task was asked to cancel
    (``Task.cancelling()``). A cancellation exception caught while this is False is a
    stray one: an ordinary failure of whatever raised it."""
    if anyio.current_effective_deadline() == -math.inf:
        return True
    try:
        task = asyncio.current_task()
    except RuntimeError:  # not on asyncio: other backends cancel only through scopes
        return False
    return task is not None and task.cancelling() > 0
