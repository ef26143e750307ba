"""The PostgreSQL run store's listener: NOTIFY wake-ups for tails, cancels for owners.

Layer: store backend (psycopg, asyncio). One connection per store ``LISTEN``\\s on
:data:`~._pg_schema.EVENTS_CHANNEL` (each committed batch names the runs it touched) and
:data:`~._pg_schema.CONTROL_CHANNEL` (a run's cancel was asked). A :class:`Watch` is
set by the next notification naming its run; a lost connection is re-opened (with a
pause), and every watch is set then, since notifications may have been missed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from ._pg_connect import CONNECT_OPTIONS
from ._pg_schema import CONTROL_CHANNEL, EVENTS_CHANNEL

__all__ = ["Listener", "Watch"]

RECONNECT_PAUSE = 1.0  # seconds between two attempts to listen again


class Watch:
    """A wake-up for one run (:meth:`a2e_host.store.SharedRunStore.watch`).

    Use it as a context manager (or call :meth:`close`); :meth:`wait` returns once a
    committed batch touched the run since the watch was made or last waited, or after
    ``at_most`` seconds.
    """

    __slots__ = ("run_id", "_event", "_watches")

    def __init__(self, run_id: str, watches: dict[str, set[Watch]]) -> None:
        self.run_id = run_id
        self._event = asyncio.Event()
        self._watches = watches
        watches.setdefault(run_id, set()).add(self)

    def set(self) -> None:
        self._event.set()

    async def wait(self, at_most: float) -> bool:
        """Wait for a change; returns whether one came (False: ``at_most`` seconds passed)."""
        try:
            await asyncio.wait_for(self._event.wait(), at_most)
        except TimeoutError:
            return False
        finally:
            self._event.clear()
        return True

    def close(self) -> None:
        """Stop watching (idempotent)."""
        watching = self._watches.get(self.run_id)
        if watching is not None:
            watching.discard(self)
            if not watching:
                del self._watches[self.run_id]

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class Listener:
    """The store's listening connection.

    Args:
        url: the database.
        log: a structlog logger.
        on_cancel: called with a run id named on the control channel.
    """

    def __init__(self, url: str, log: Any, on_cancel: Callable[[str], None]) -> None:
        self._url = url
        self._log = log
        self._on_cancel = on_cancel
        self._watches: dict[str, set[Watch]] = {}
        self.listening = asyncio.Event()

    def watch(self, run_id: str) -> Watch:
        return Watch(run_id, self._watches)

    def _wake(self, payload: str) -> None:
        if payload == "*":
            targets = [w for ws in self._watches.values() for w in ws]
        else:
            targets = [w for run_id in payload.split(",")
                       for w in self._watches.get(run_id, ())]
        for watch in targets:
            watch.set()

    async def run(self) -> None:
        """Listen until cancelled, re-connecting after a failure."""
        import psycopg

        while True:
            try:
                async with await psycopg.AsyncConnection.connect(
                        self._url, autocommit=True, **CONNECT_OPTIONS) as conn:
                    await conn.execute(f"LISTEN {EVENTS_CHANNEL}")
                    await conn.execute(f"LISTEN {CONTROL_CHANNEL}")
                    self.listening.set()
                    self._wake("*")  # what was missed while not listening
                    async for note in conn.notifies():
                        if note.channel == CONTROL_CHANNEL:
                            self._on_cancel(note.payload)
                        else:
                            self._wake(note.payload)
            except psycopg.Error as exc:
                self.listening.clear()
                self._log.warning("listening to the run store failed; listening again",
                                  error=str(exc))
                with contextlib.suppress(Exception):
                    self._wake("*")
                await asyncio.sleep(RECONNECT_PAUSE)
