"""Helpers of the run-store tests: frames whose bytes say their run and ``seq``, and an
outbox that records what reaches it (and can check the store had it first).

A crash-test writer runs as ``python -m tests.support.store_writer PATH`` (see there).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import anyio
import msgspec

from a2e_host.store import RunRecord, StoredFrame


def frame_bytes(run_id: str, seq: int, size: int = 0) -> bytes:
    """A frame's bytes: its run and ``seq``, padded to at least ``size`` bytes."""
    head = f'{{"run":"{run_id}","seq":{seq},"pad":"'.encode()
    return head + b"x" * max(0, size - len(head) - 2) + b'"}'


def frame(run_id: str, seq: int, size: int = 0, output: bytes | None = None) -> StoredFrame:
    return StoredFrame(seq, f"n{seq % 7}", "done", frame_bytes(run_id, seq, size), output)


def record(run_id: str, principal: str = "alice", **fields: object) -> RunRecord:
    return RunRecord(run_id=run_id, principal=principal, req_id=f"req-{run_id}",
                     **fields)  # type: ignore[arg-type]


def stored_seqs(path: str, run_id: str) -> list[int]:
    """The ``seq``s of ``run_id`` in the file (its ``events`` rows and the seqs its
    ``segments`` span), read on a connection of its own, each as often as stored."""
    return sorted(seq for seq, _, _ in stored_events(path, run_id))


def stored_events(path: str, run_id: str | None = None) -> list[tuple[int, str, str]]:
    """Every stored ``(seq, node_id, phase)`` of ``run_id`` (None: of every run) in the
    file, read on a connection of its own and decoded from segments here (not through
    the store's own reads), in ``seq`` order."""
    with sqlite3.connect(path) as conn:
        return [(seq, node_id, phase) for seq, node_id, phase, _ in on_disk(conn, run_id)]


def on_disk(conn: sqlite3.Connection, run_id: str | None = None
            ) -> list[tuple[int, str, str, bytes | None]]:
    """Every stored ``(seq, node_id, phase, frame)`` of ``run_id`` (None: of every run),
    read on ``conn``: ``events`` rows (``frame`` None when it is in ``blobs``) and the
    frames of ``segments``, decoded here, in ``seq`` order."""
    where = "" if run_id is None else " WHERE run = (SELECT id FROM runs WHERE run_id = ?)"
    args = () if run_id is None else (run_id,)
    found: list[tuple[int, str, str, bytes | None]] = list(conn.execute(
        "SELECT seq, node_id, phase, payload FROM events" + where, args))
    for first, last, data in conn.execute(
            "SELECT first_seq, last_seq, frames FROM segments" + where, args):
        items = msgspec.msgpack.decode(data)
        assert len(items) == last - first + 1
        found += [(first + i, node_id, phase, data)
                  for i, (node_id, phase, data, _) in enumerate(items)]
    return sorted(found, key=lambda row: row[0])


class RecordingOutbox:
    """A :class:`~a2e_host.runtime.runs.FrameOutbox` keeping every frame.

    Args:
        check: called with each frame as it arrives (e.g. "is it on disk already?").
        high_water: frames above which it reports ``full`` until :meth:`drain`.
    """

    def __init__(self, check: Callable[[bytes], None] | None = None,
                 high_water: int | None = None) -> None:
        self.frames: list[bytes] = []
        self.full = False
        self._check = check
        self._high_water = high_water
        self._drained = anyio.Event()
        self.arrived = anyio.Event()

    def send_frame_nowait(self, frame: bytes) -> None:
        if self._check is not None:
            self._check(frame)
        self.frames.append(frame)
        if self._high_water is not None and len(self.frames) > self._high_water:
            self.full = True
        self.arrived.set()
        self.arrived = anyio.Event()

    async def wait_writable(self) -> None:
        while self.full:
            await self._drained.wait()

    def drain(self) -> None:
        """Let waiting producers go on (the frames stay recorded)."""
        self.full = False
        self._high_water = None
        self._drained.set()
        self._drained = anyio.Event()

    async def wait_for(self, count: int) -> None:
        """Wait until at least ``count`` frames arrived."""
        while len(self.frames) < count:
            await self.arrived.wait()
