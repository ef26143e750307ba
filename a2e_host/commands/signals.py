"""SIGINT and SIGTERM for the commands that serve (``serve``, ``stdio``, ``mcp``).

Layer: command. anyio's signal receiver gives a signal back its default action when it
closes, so a command could only ignore SIGTERM after that: a SIGTERM arriving in between
(a supervisor repeating it while the host closes its store and children) killed the
process with status -15. Here SIGTERM goes from its handler straight to "ignored" in one
``sigaction``, so no SIGTERM after the receiver closes can kill a closing host. SIGINT gets
its default back, so Ctrl-C still interrupts a close that hangs.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import FrameType

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

__all__ = ["SIGNALS_KEPT", "stop_signals"]

SIGNALS_KEPT = 16
"""Signals waiting to be read at most; later ones are dropped until the command reads
(each signal only repeats a stop already asked)."""


@contextmanager
def stop_signals() -> Iterator[MemoryObjectReceiveStream[signal.Signals]]:
    """Receive SIGINT and SIGTERM while the block runs; on leaving it, SIGTERM is ignored
    from then on and SIGINT has its default action back.

    Enter it in the main thread, in a task of an asyncio event loop (the commands run
    under anyio's asyncio backend).

    Yields:
        The signals (``signal.SIGINT`` or ``signal.SIGTERM``) as they arrive.

    Raises:
        RuntimeError: no asyncio event loop runs in this thread, or this is not the main
            thread.
    """
    loop = asyncio.get_running_loop()
    # bounded: a signal sent faster than the command reads them is one it already has
    send, receive = anyio.create_memory_object_stream[signal.Signals](SIGNALS_KEPT)

    def deliver(signum: signal.Signals) -> None:
        with suppress(anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.WouldBlock):
            send.send_nowait(signum)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        # Python runs this in the main thread between two bytecodes, possibly inside the
        # loop's own code: hand the signal to the loop instead of acting here
        loop.call_soon_threadsafe(deliver, signal.SIGTERM)

    with send, receive:
        # the loop's SIGINT handler also sets the wakeup descriptor, which wakes the loop
        # for a SIGTERM that a worker thread received; the loop then runs on_sigterm
        loop.add_signal_handler(signal.SIGINT, deliver, signal.SIGINT)  # checks the thread
        try:
            signal.signal(signal.SIGTERM, on_sigterm)
            yield receive
        finally:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # never the default in between
            loop.remove_signal_handler(signal.SIGINT)
