"""One session's processes, as the ``proc`` plugin keeps them (PROTOCOL.md §10).

A process is listed from its ``proc/spawn/req`` on: ``None`` while it starts, with an
event in :attr:`SessionProcs.starting` that is set once its start is over, so a request
naming it can wait for that instead of being refused; a start that failed is remembered
(the last :data:`KEPT_ENDED`) so such a request is answered with why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from .process import LiveProcess

__all__ = ["KEPT_ENDED", "SessionProcs"]

KEPT_ENDED = 64
"""Ended processes (and failed starts) a session keeps for ``proc/status`` and the
answers to requests naming them (the oldest is forgotten first)."""


@dataclass
class SessionProcs:
    """One session's processes, in the order they were spawned."""

    procs: dict[str, LiveProcess | None] = field(default_factory=dict)  # None: spawning
    counter: int = 0
    pending_writes: dict[str, int] = field(default_factory=dict)
    closing: bool = False  # the session stopped taking work: a process starting now closes
    starting: dict[str, anyio.Event] = field(default_factory=dict)  # set once it resolved
    spawn_failures: dict[str, str] = field(default_factory=dict)  # proc_id -> why not
    waiting: int = 0  # requests waiting for a start
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
