"""Retention: the host's periodic sweep of its run store (DURABILITY.md §3.1 "Status").

Layer: runtime (anyio). While a host runs with a store it calls
:meth:`RunStore.prune <a2e_host.store.RunStore.prune>` every ``interval`` seconds: finished
runs past their ``retention_until`` lose their events, blobs and response and read
``expired``. Each sweep is bounded (at most :data:`MAX_CALLS_PER_SWEEP` prune calls of
:data:`RUNS_PER_CALL` runs; the store bounds the events one call deletes), so a backlog
is worked off over several sweeps instead of holding the store's writer for long.
"""

from __future__ import annotations

import time
from typing import Any

import anyio

from ..store import RunStore, StoreError

__all__ = ["prune_periodically", "sweep", "RUNS_PER_CALL", "MAX_CALLS_PER_SWEEP"]

RUNS_PER_CALL = 100
"""Runs one prune call expires at most."""

MAX_CALLS_PER_SWEEP = 10
"""Prune calls one sweep makes at most (it stops earlier once a call finds less to do)."""


async def sweep(store: RunStore, now: float | None = None) -> int:
    """One bounded sweep: prune until a call expires fewer than :data:`RUNS_PER_CALL`
    runs, at most :data:`MAX_CALLS_PER_SWEEP` calls.

    Args:
        now: unix seconds to prune against; the current time when None.

    Returns:
        How many runs it expired.

    Raises:
        StoreError: the store is closed or broken.
    """
    expired = 0
    for _ in range(MAX_CALLS_PER_SWEEP):
        count = await store.prune(time.time() if now is None else now, limit=RUNS_PER_CALL)
        expired += count
        if count < RUNS_PER_CALL:
            break
    return expired


async def prune_periodically(store: RunStore, interval: float, log: Any) -> None:
    """Sweep ``store`` every ``interval`` seconds until cancelled (a failed sweep is
    logged and the next one tried; a broken or closed store ends the loop)."""
    while True:
        await anyio.sleep(interval)
        try:
            expired = await sweep(store)
        except StoreError as exc:
            log.error("retention stopped: the run store cannot be pruned", error=str(exc))
            return
        except Exception as exc:
            log.error("a retention sweep failed; trying again later", exc_info=exc)
            continue
        if expired:
            log.info("expired runs past their retention", count=expired)
