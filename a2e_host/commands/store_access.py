"""What the run-store commands share (``runs list``, ``runs show``, ``graph --run``): which
store file to read, opening it read-only, finding one run, and printing its times.

Layer: command support. The store is read through its interface (:mod:`a2e_host.store`)
opened ``readonly`` (no writer, no lock): a host may be serving from the same file.

Which store: ``--store PATH``, else ``A2E_STORE``, else the ``--config`` file's ``[store]
path`` (:func:`~a2e_host.config.load_config` reads the last two). A missing file is an error,
never a new empty store.
"""

from __future__ import annotations

import datetime as dt
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from ..store import (
    RunRecord,
    RunStatus,
    RunStore,
    StoredFrame,
    StoreError,
    backend_of,
    open_store,
)

__all__ = [
    "EXIT_NOT_FOUND",
    "EXIT_USAGE",
    "FRAME_PAGE",
    "StoreAccessError",
    "fail",
    "find_run",
    "format_duration",
    "format_time",
    "iter_frames",
    "open_readonly",
    "printable",
    "resolve_store",
]

EXIT_NOT_FOUND = 1
"""Exit code for an unknown or expired run."""
EXIT_USAGE = 2
"""Exit code for no store named, or a store file that is missing or unreadable."""
FRAME_PAGE = 500
"""Frames read from the store at once: memory holds one page, whatever the run's length."""


class StoreAccessError(Exception):
    """A store or run the command cannot use; the message is one line saying which and
    how to go on, ``exit_code`` what the command returns."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def resolve_store(store: str | None, config_path: str | None) -> Path | str:
    """The store file to read: ``store``, else ``A2E_STORE``, else the configuration's
    (a ``postgresql://`` URL is returned as it is).

    Raises:
        StoreAccessError: none is named (exit 2), the configuration is bad (2), or the
            file does not exist or is a directory (2).
    """
    path = store
    if not path:
        from ..config import load_config

        try:
            path = load_config(config_path).store
        except ValueError as exc:
            raise StoreAccessError(str(exc), EXIT_USAGE) from None
    if not path:
        raise StoreAccessError(
            "no run store named: pass --store PATH (the file 'a2e-host serve --store' "
            "writes), or set A2E_STORE", EXIT_USAGE)
    if backend_of(path) != "sqlite":
        return path
    found = Path(path)
    if not found.exists():
        raise StoreAccessError(f"run store {path!r} does not exist; check the path given "
                               "to --store (or A2E_STORE)", EXIT_USAGE)
    if found.is_dir():
        raise StoreAccessError(f"run store {path!r} is a directory; pass the store's file",
                               EXIT_USAGE)
    return found


@asynccontextmanager
async def open_readonly(path: Path | str) -> AsyncIterator[RunStore]:
    """The store at ``path``, open for reading only; closed on exit.

    Raises:
        StoreAccessError: the file is not a run store, is from a newer a2e-host, or
            cannot be read (exit 2).
    """
    try:
        store = await open_store(os.fspath(path), readonly=True)
    except StoreError as exc:
        raise StoreAccessError(f"cannot read run store {str(path)!r}: {exc}",
                               EXIT_USAGE) from None
    try:
        yield store
    finally:
        await store.aclose()


async def find_run(store: RunStore, run_id: str, path: Path | str) -> RunRecord:
    """The run ``run_id``.

    Raises:
        StoreAccessError: unknown (exit 1), or expired: its events were pruned (exit 1).
    """
    record = await store.get(run_id)
    if record is None:
        raise StoreAccessError(
            f"no run {run_id!r} in {str(path)!r}; list the runs with "
            f"'a2e-host runs list --store {path}'", EXIT_NOT_FOUND)
    if record.status == RunStatus.EXPIRED:
        raise StoreAccessError(
            f"run {run_id!r} has expired: its retention ended and its events and response "
            "were pruned (only its record is left, shown by 'a2e-host runs list')",
            EXIT_NOT_FOUND)
    return record


async def iter_frames(
    store: RunStore, run_id: str, *, after: int = 0, limit: int | None = None
) -> AsyncIterator[StoredFrame]:
    """A run's stored frames with ``seq > after``, in ``seq`` order, read
    :data:`FRAME_PAGE` at a time; at most ``limit`` (None: all)."""
    left = limit
    while True:
        want = FRAME_PAGE if left is None else min(left, FRAME_PAGE)
        if want <= 0:
            return
        page = await store.frames(run_id, after=after, limit=want)
        for frame in page:
            yield frame
        if len(page) < want:
            return
        after = page[-1].seq
        if left is not None:
            left -= len(page)


def format_time(unix: float | None) -> str:
    """``2026-12-01 19:30:05Z`` (UTC, seconds), or ``-`` for None or 0."""
    if not unix:
        return "-"
    moment = dt.datetime.fromtimestamp(unix, dt.UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def format_duration(record: RunRecord, now: float) -> str:
    """How long the run took (``updated - created``), or has run so far (``now -
    created``, with ``+``) while ``running``: ``0.25s``, ``12.3s``, ``4m05s``,
    ``2h03m``, ``3d04h``."""
    running = record.status == RunStatus.RUNNING
    seconds = max(0.0, (now if running else record.updated) - record.created)
    if seconds < 10:
        text = f"{seconds:.2f}s"
    elif seconds < 60:
        text = f"{seconds:.1f}s"
    elif seconds < 3600:
        text = f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    elif seconds < 86400:
        text = f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"
    else:
        text = f"{int(seconds // 86400)}d{int(seconds % 86400 // 3600):02d}h"
    return text + ("+" if running else "")


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7f, 0xa0)) if c != 0x0a}


def printable(text: str) -> str:
    """``text`` with control characters but newline shown as ``\\xNN``: what a run stored
    came from an untrusted request, and a terminal must not act on its escape sequences."""
    return text.translate(_CONTROL)


def fail(command: str, exc: StoreAccessError) -> int:
    """Print ``exc`` as the command's one error line on stderr; return its exit code."""
    print(f"a2e-host {command}: {printable(str(exc))}", file=sys.stderr)
    return exc.exit_code
