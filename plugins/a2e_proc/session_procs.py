"""One session's processes, as the ``proc`` plugin keeps them (PROTOCOL.md §10).

A process is listed from its ``proc/spawn/req`` on: ``None`` while it starts, with an
event in :attr:`SessionProcs.starting` that is set once its start is over, so a request
naming it can wait for that instead of being refused; a start that failed is remembered
(the last :data:`KEPT_ENDED`) so such a request is answered with why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from a2e_host.exceptions import Busy

from .kills import KillUnderWay
from .process import CLOSE_GRACE, LiveProcess

__all__ = ["KEPT_ENDED", "MAX_WAITING_FOR_START", "SETTLE_WAIT", "START_WAIT", "SessionProcs"]

KEPT_ENDED = 64
"""Ended processes (and failed starts) a session keeps for ``proc/status`` and the
answers to requests naming them (the oldest is forgotten first)."""


MAX_WAITING_FOR_START = 16
"""``proc/write``/``kill``/``status`` requests of one session waiting at once for a process
that is still starting; past it ``busy``."""

START_WAIT = 10.0
"""Seconds a request naming a process that is still starting waits for its start (then
``unknown_proc``); a pipelined script need not wait for ``proc/spawn/resp`` itself."""

SETTLE_WAIT = 1.5
"""Seconds a closing session gives its starting processes and the requests already
received for them before closing the processes' stdin (within the host's 5 s grace)."""


@dataclass
class SessionProcs:
    """One session's processes, in the order they were spawned."""

    procs: dict[str, LiveProcess | None] = field(default_factory=dict)  # None: spawning
    counter: int = 0
    pending_writes: dict[str, int] = field(default_factory=dict)
    pending_bytes: int = 0  # data of the session's writes not yet taken by a stdin
    closing: bool = False  # the session stopped taking work: a process starting now closes
    starting: dict[str, anyio.Event] = field(default_factory=dict)  # set once it resolved
    spawn_failures: dict[str, str] = field(default_factory=dict)  # proc_id -> why not
    waiting: int = 0  # requests waiting for a start
    kills: dict[str, KillUnderWay] = field(default_factory=dict)  # proc_id -> its kill
    changed: anyio.Event = field(default_factory=anyio.Event)

    def notify(self) -> None:
        """Wake whoever waits for this session's starts and writes to settle."""
        self.changed.set()
        self.changed = anyio.Event()

    @property
    def settled(self) -> bool:
        return not (self.starting or self.waiting or self.pending_writes)

    def resolved(self, proc_id: str, failure: str = "") -> None:
        """``proc_id``'s start is over (``failure``: why it did not start)."""
        event = self.starting.pop(proc_id, None)
        if failure:
            self.spawn_failures[proc_id] = failure
            for key in list(self.spawn_failures)[: max(0, len(self.spawn_failures)
                                                       - KEPT_ENDED)]:
                del self.spawn_failures[key]
        if event is not None:
            event.set()
        self.notify()

    @property
    def live(self) -> int:
        return sum(1 for p in self.procs.values() if p is None or not p.ended.is_set())

    def forget_ended(self) -> None:
        ended = [k for k, p in self.procs.items() if p is not None and p.ended.is_set()]
        for key in ended[: max(0, len(ended) - KEPT_ENDED)]:
            del self.procs[key]

    def check_bytes(self, size: int, limit: int) -> None:
        """Refuse a write whose ``size`` bytes would take the session's waiting writes
        past ``limit`` (its ``max_message_bytes``).

        Raises:
            Busy: they would.
        """
        if self.pending_bytes and self.pending_bytes + size > limit:
            # every process's writes may wait at once: bound the session's bytes, not
            # only the count per process (proc_limit x 4 writes x 16 MiB otherwise)
            raise Busy(
                f"{self.pending_bytes} bytes of this session's writes are waiting for "
                f"stdin already and {size} more would pass {limit} "
                "(max_message_bytes); wait for a proc/write/resp before sending more"
            )

    async def end_all(self) -> None:
        """End every process and wait (bounded) for their trees to be gone."""
        live = [p for p in self.procs.values() if p is not None and not p.ended.is_set()]
        for process in live:
            process.abort()
        with anyio.move_on_after(CLOSE_GRACE + 5.0):
            for process in live:
                await process.ended.wait()
