"""``a2e-host runs list [--status S[,S…]]… [--failed] [--limit N] [--cursor C] [--json]
[--store PATH]``: the runs of a run store, newest first.

Layer: command (reads the store read-only, prints to stdout; errors one line on stderr).
The store's own pagination (:meth:`~a2e_host.store.RunStore.list`, keyset cursors) reads
at most ``--limit`` runs; when more are left, the last line names the ``--cursor`` that
continues. Every principal's runs are listed: whoever can read the store file is its
operator (on the wire, ``run/list`` shows a session only its own principal's).

Text (control characters shown as ``\\xNN``): one row per run, columns ``RUN``,
``STATUS``, ``CHAIN``, ``REQ``, ``CREATED`` (UTC), ``DURATION`` (``+`` while running: so
far), ``PRINCIPAL``. ``--json``: one object ``{"runs": [{run_id, status, chain_id,
req_id, principal, created, updated, duration_s, last_seq, deadline, idempotency_key,
retention_until}], "next_cursor"}`` (times unix seconds; ``duration_s`` as in the
table, so far while running).

``--status`` takes one status, several comma-separated, or is repeated: a run in any of
them is listed. ``--failed`` adds every unsuccessful ending (:data:`UNSUCCESSFUL`:
``failed``, ``cancelled``, ``timeout``, ``interrupted``, ``budget_exhausted``).

Exit codes: 0 listed (also when none match), 2 an unknown ``--status``, a bad
``--cursor``, or a store that is missing or unreadable.
"""

from __future__ import annotations

import json
import time
from typing import Any

import anyio

from ..store import RunRecord, RunStatus
from .store_access import (
    EXIT_USAGE,
    StoreAccessError,
    fail,
    format_duration,
    format_time,
    open_readonly,
    printable,
    resolve_store,
)

__all__ = ["UNSUCCESSFUL", "runs_list_main", "record_summary"]

PAGE = 200
"""Runs asked of the store at once (``--limit`` beyond it reads several pages)."""
_COLUMNS = ("RUN", "STATUS", "CHAIN", "REQ", "CREATED", "DURATION", "PRINCIPAL")
UNSUCCESSFUL: tuple[RunStatus, ...] = (
    RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMEOUT, RunStatus.INTERRUPTED,
    RunStatus.BUDGET_EXHAUSTED,
)
"""The statuses ``--failed`` stands for: every way a run can end without succeeding."""


def runs_list_main(
    *,
    status: str | list[str] | None,
    limit: int,
    cursor: str | None,
    json_out: bool,
    store: str | None,
    config_path: str | None,
    failed: bool = False,
) -> int:
    """List the store's runs.

    Args:
        status: only runs in these :class:`~a2e_host.store.RunStatus` values: each
            item one value or several comma-separated (``--status`` repeated); None:
            all.
        limit: at most this many runs (>= 1).
        cursor: continue after a previous listing (its ``next_cursor``); None: newest.
        json_out: one JSON object instead of a table.
        store: ``--store``; None: ``A2E_STORE`` or the configuration's ``store``.
        config_path: ``--config``.
        failed: also every status of :data:`UNSUCCESSFUL` (``--failed``).

    Returns:
        The exit code (see the module docstring).
    """
    try:
        wanted = _statuses([status] if isinstance(status, str) else status or [], failed)
        path = resolve_store(store, config_path)
        records, next_cursor = anyio.run(_read, path, wanted, cursor, limit)
    except StoreAccessError as exc:
        return fail("runs list", exc)
    now = time.time()
    if json_out:
        print(json.dumps({"runs": [record_summary(r, now) for r in records],
                          "next_cursor": next_cursor}, ensure_ascii=False))
        return 0
    if not records:
        which = f" with status {' or '.join(wanted)}" if wanted else ""
        print(f"no runs{which} in {str(path)!r}" + (" after that cursor" if cursor else ""))
        return 0
    rows = [(r.run_id, str(r.status), r.chain_id or "-", r.req_id or "-",
             format_time(r.created), format_duration(r, now), r.principal or "-")
            for r in records]
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(_COLUMNS)]
    for row in (_COLUMNS, *rows):
        print(printable("  ".join(cell.ljust(w)
                                  for cell, w in zip(row, widths, strict=True)).rstrip()))
    if next_cursor is not None:
        again = f" --status {','.join(wanted)}" if wanted else ""
        print(f"(more runs: a2e-host runs list --store {path}{again} --cursor {next_cursor})")
    return 0


def record_summary(record: RunRecord, now: float) -> dict[str, Any]:
    """A run's record as JSON-able data, without its request and response bytes."""
    running = record.status == RunStatus.RUNNING
    return {
        "run_id": record.run_id, "status": str(record.status), "chain_id": record.chain_id,
        "req_id": record.req_id, "principal": record.principal, "created": record.created,
        "updated": record.updated,
        "duration_s": round(max(0.0, (now if running else record.updated) - record.created),
                            3),
        "last_seq": record.last_seq, "deadline": record.deadline,
        "idempotency_key": record.idempotency_key, "retention_until": record.retention_until,
    }


def _statuses(texts: list[str], failed: bool) -> tuple[RunStatus, ...] | None:
    """The statuses asked for, in :class:`RunStatus` order, each once; None: all."""
    wanted = set(UNSUCCESSFUL) if failed else set()
    for text in texts:
        for name in text.split(","):
            try:
                wanted.add(RunStatus(name.strip()))
            except ValueError:
                names = ", ".join(s.value for s in RunStatus)
                raise StoreAccessError(f"unknown --status {name.strip()!r}; use one of: "
                                       f"{names} (several: --status failed,interrupted, "
                                       "or --failed for every unsuccessful one)",
                                       EXIT_USAGE) from None
    return tuple(s for s in RunStatus if s in wanted) or None


async def _read(
    path: Any, status: tuple[RunStatus, ...] | None, cursor: str | None, limit: int
) -> tuple[list[RunRecord], str | None]:
    records: list[RunRecord] = []
    async with open_readonly(path) as store:
        while len(records) < limit:
            try:
                page, cursor = await store.list(status=status, cursor=cursor,
                                                limit=min(PAGE, limit - len(records)))
            except ValueError as exc:
                raise StoreAccessError(f"{exc}; start again without --cursor",
                                       EXIT_USAGE) from None
            records.extend(page)
            if cursor is None:
                break
    return records, cursor
