"""The SQLite run store's checkpointer thread: WAL checkpoints off the writer's path.

Layer: store backend (stdlib ``sqlite3`` and ``threading``; no event loop). SQLite's
automatic checkpoint runs inside the commit that crosses its threshold, in the writer
thread: that commit (and every frame waiting on it to reach the wire) then also copies
the WAL into the database file and syncs both, 10–15 ms for a few MB. Here the writer
only counts what it committed and, past :data:`CHECKPOINT_BYTES`, asks this thread, which
runs ``PRAGMA wal_checkpoint(PASSIVE)`` on a connection of its own while the writer goes
on (a passive checkpoint never blocks the writer nor readers; SQLite releases the
interpreter lock while it works). The writer's own automatic checkpoint stays, at a
higher threshold (:data:`BACKSTOP_PAGES`), for a WAL this thread could not keep short.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

from ._schema import BUSY_TIMEOUT_MS

__all__ = ["BACKSTOP_PAGES", "CHECKPOINT_BYTES", "Checkpointer"]

CHECKPOINT_BYTES = 4 * 1024 * 1024
"""Bytes committed (frames, outputs, responses) after which a checkpoint is asked."""
BACKSTOP_PAGES = 8192
"""The writer connection's ``wal_autocheckpoint``: pages of WAL past which its commit
checkpoints itself (SQLite's default is 1,000)."""


def _say(method: Any, event: str, **fields: Any) -> None:
    try:
        method(event, **fields)
    except Exception:  # noqa: BLE001 — a logger whose stream closed must not end the thread
        pass


class Checkpointer:
    """One thread that checkpoints ``path``'s WAL when :meth:`request` is called.

    Args:
        path: the database file (its WAL mode is set up by the writer).
        log: a structlog logger (a failed checkpoint is logged, never raised: the next
            request, or the writer's backstop, tries again).
    """

    def __init__(self, path: str, log: Any) -> None:
        self._path = path
        self._log = log
        self._cond = threading.Condition(threading.Lock())
        self._asked = False
        self._closing = False
        self.checkpoints = 0  # checkpoints run (for tests and the curious)
        self.ran = threading.Event()  # set after each checkpoint (cleared by who waits)
        self._thread = threading.Thread(target=self._main, name="a2e-store-checkpointer",
                                        daemon=True)
        self._thread.start()

    def request(self) -> None:
        """Ask for a checkpoint (at most one is pending; never blocks for long)."""
        with self._cond:
            self._asked = True
            self._cond.notify()

    def close(self) -> None:
        """End the thread (a checkpoint under way finishes first) and wait for it."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()

    def _main(self) -> None:
        try:
            conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        except sqlite3.Error as exc:
            _say(self._log.error, "the run store's checkpointer cannot open the store; "
                 "the writer checkpoints itself", error=str(exc))
            return
        try:
            while True:
                with self._cond:
                    while not self._asked and not self._closing:
                        self._cond.wait()
                    if self._closing:
                        return
                    self._asked = False
                try:
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.checkpoints += 1
                    self.ran.set()
                except sqlite3.Error as exc:
                    _say(self._log.warning, "a checkpoint of the run store failed; the "
                         "next one tries again", error=str(exc))
        finally:
            conn.close()
