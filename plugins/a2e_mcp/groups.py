"""The process group of a stdio MCP server, stopped whole once its connection ends.

Layer: plugin (os signals; no I/O of its own). Source: PROTOCOL.md §12.

The official SDK's ``stdio_client`` starts a server in a new session (its process group is
its pid), closes its stdin when the connection ends and kills the whole group only when
the server itself has not exited within two seconds. A server that exits at once but left
children behind (a wrapper such as ``npx`` or ``uvx`` whose child ignores the closed
stdin, a server that forked a worker) would leave them running for ever. The link records
the group of each server it starts (:func:`recording`, which sees the SDK's spawn) and
kills what is left of it once the SDK let go of the server (:func:`kill_groups`).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from typing import Any

__all__ = ["kill_groups", "recording"]

_spawned: ContextVar[list[int] | None] = ContextVar("a2e_mcp_spawned", default=None)
_MARK = "_a2e_records_groups"


def _install() -> None:
    """Wrap the SDK's spawn (once) so that the caller's :func:`recording` list gets the pid
    of each server started; a SDK without it leaves groups to its own shutdown."""
    import mcp.client.stdio as stdio

    spawn = getattr(stdio, "_create_platform_compatible_process", None)
    if spawn is None or getattr(spawn, _MARK, False):
        return

    async def recorded_spawn(*args: Any, **kwargs: Any) -> Any:
        process = await spawn(*args, **kwargs)
        pids = _spawned.get()
        if pids is not None:
            pids.append(process.pid)
        return process

    setattr(recorded_spawn, _MARK, True)
    stdio._create_platform_compatible_process = recorded_spawn


@contextmanager
def recording(pids: list[int]) -> Iterator[None]:
    """Within the block, the pid (= process group) of each stdio server the SDK starts in
    this task is appended to ``pids``."""
    _install()
    token = _spawned.set(pids)
    try:
        yield
    finally:
        _spawned.reset(token)


def kill_groups(pids: list[int]) -> None:
    """SIGKILL whatever is left of the process groups ``pids`` (the servers themselves were
    stopped by the SDK already: these are the children they left behind)."""
    if not hasattr(os, "killpg"):  # pragma: no cover - Windows: the SDK's job object
        return
    for pid in pids:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
    pids.clear()
