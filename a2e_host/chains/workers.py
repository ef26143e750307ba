"""A run's worker tasks: ready nodes taken from one deque by at most ``max_concurrency``
workers, with slots beyond the run's own borrowed from the request.

Layer: runtime (anyio). Source: PROTOCOL.md §6 (``max_concurrency`` bounds a request).

A worker that finishes a node pushes the nodes it made ready and keeps going; an idle
worker is woken, and a new worker is spawned only when every existing one is busy. A chain
of fast nodes thus runs on one task (anyio task-group children cost ~60 µs each), while a
chain of slow nodes spreads over the pool. Every run has one worker of its own; any
further worker takes a spare slot from the request's
:class:`~a2e_host.chains.budget.RequestBudget` and gives it back when it stops, and a
worker holding one stops when it goes idle while sub-chains run, so the slots flow to
where work is (see :mod:`a2e_host.chains.scheduler`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence

import anyio
import anyio.abc
import anyio.lowlevel

from .budget import RequestBudget

__all__ = ["WorkerPool"]

_YIELD_EVERY = 64  # nodes a worker runs before it yields to the event loop


class WorkerPool:
    """The workers of one run.

    Args:
        run_node: runs one ready node (by plan index) to its end; never raises but
            cancellation.
        ended: whether the run has ended (an idle worker then stops).
        request: the request's budget, for spare worker slots.
        max_concurrency: the most workers this run may have.
    """

    __slots__ = (
        "_run_node", "_ended", "_request", "_max", "_ready", "_idle", "_workers", "_busy",
        "_tg",
    )

    def __init__(
        self,
        run_node: Callable[[int], Awaitable[None]],
        ended: Callable[[], bool],
        request: RequestBudget,
        max_concurrency: int,
    ) -> None:
        self._run_node = run_node
        self._ended = ended
        self._request = request
        self._max = max_concurrency
        self._ready: deque[int] = deque()
        self._idle: list[anyio.Event] = []
        self._workers = 0
        self._busy = 0
        self._tg: anyio.abc.TaskGroup | None = None

    async def serve(self, roots: Sequence[int]) -> None:
        """Run ``roots`` and every node pushed after them; returns when every worker has
        stopped (the run ended, or nothing is left to run)."""
        async with anyio.create_task_group() as tg:
            self._tg = tg
            self._ready.extend(roots)
            if roots:
                self._workers += 1
                tg.start_soon(self._worker, False)  # this run's own worker
            for _ in range(min(len(roots), self._max) - 1):
                if not self._spawn_borrowed():
                    break

    def push(self, ready: list[int]) -> None:
        """Queue nodes made ready: wake idle workers, spawn more only while all are busy."""
        self._ready.extend(ready)
        wanted = len(ready)
        while wanted and self._idle:
            self._idle.pop().set()
            wanted -= 1
        # the current worker takes one; spawn only while every worker is busy
        spare = self._workers - self._busy
        while wanted > spare and self._spawn_borrowed():
            wanted -= 1

    def wake_idle(self) -> None:
        """Wake every idle worker (the run ended: they stop)."""
        for wake in self._idle:
            wake.set()
        self._idle.clear()

    def _spawn_borrowed(self) -> bool:
        """Start one more worker on a spare slot of the request, if this run is under
        ``max_concurrency`` and a slot is left; whether one was started."""
        request = self._request
        if self._workers >= self._max or request.spare_workers <= 0:
            return False
        assert self._tg is not None
        request.spare_workers -= 1
        self._workers += 1
        self._tg.start_soon(self._worker, True)
        return True

    async def _worker(self, borrowed: bool) -> None:
        ready = self._ready
        request = self._request
        ran = 0
        try:
            while True:
                if not ready:
                    if self._ended():
                        return
                    if borrowed and request.nested:
                        return  # give the slot back to where sub-chains may need it
                    wake = anyio.Event()
                    self._idle.append(wake)
                    if borrowed:
                        request.idle_borrowed.add(wake)
                    await wake.wait()
                    if borrowed:
                        request.idle_borrowed.discard(wake)
                        if wake in self._idle:  # woken to give its slot back, not for work
                            self._idle.remove(wake)
                    continue
                index = ready.popleft()
                if ready and not self._idle and request.nested:
                    # slots given back by idle workers elsewhere in the request: take one
                    # while this run has more ready nodes than workers
                    if len(ready) > self._workers - self._busy - 1:
                        self._spawn_borrowed()
                self._busy += 1
                try:
                    await self._run_node(index)
                finally:
                    self._busy -= 1
                ran += 1
                if ran % _YIELD_EVERY == 0:
                    await anyio.lowlevel.checkpoint()
        finally:
            self._workers -= 1
            if borrowed:
                request.spare_workers += 1
