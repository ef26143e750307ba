"""Ending the child processes the client starts: a stdio host, a WebSocket server.

Layer: client (anyio processes).
"""

from __future__ import annotations

import signal

import anyio
from anyio.abc import Process

__all__ = ["reap", "stop"]


async def reap(process: Process, close_timeout: float) -> None:
    """Wait for the child to exit; terminate, then kill, when it overstays."""
    if process.returncode is not None:
        return
    with anyio.move_on_after(close_timeout):
        await process.wait()
        return
    if process.returncode is None:
        process.terminate()
        with anyio.move_on_after(5):
            await process.wait()
            return
        process.kill()
        with anyio.move_on_after(5):
            await process.wait()


async def stop(process: Process, close_timeout: float, signum: signal.Signals) -> None:
    """Signal the child, then :func:`reap` it (terminate, then kill, if it overstays)."""
    if process.returncode is not None:
        return
    try:
        process.send_signal(signum)
    except ProcessLookupError:
        pass
    await reap(process, close_timeout)
