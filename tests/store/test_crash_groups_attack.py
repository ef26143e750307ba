"""Regression: a host killed with ``kill -9`` while durable runs write their frames in
groups (one write per loop tick, groups flushed mid-tick at GROUP_FRAMES, bursts around
512/1024, frames and outputs for blobs, the checkpointer thread at work) reopens with
every frame a client was sent, gapless, each under its own ``seq``.

The writer is this module run as ``python -m tests.store.test_crash_groups_attack PATH``:
two runs emit bursts through :class:`DurableSink`; after each tick it prints ``sent A B``,
the last ``seq`` of each run that reached its outbox (so was committed)."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from a2e_host.chains.messages import ChainEvent, chain_codec

RUNS = ("a", "b")
BURSTS = (1, 511, 512, 513, 1023, 1024, 1025, 7, 2049, 300)
SENT_BEFORE_KILL = 12_000  # frames of each run sent before the kill


def _event(run: str, seq: int) -> ChainEvent:
    pad = "z" * (6000 if seq % 37 == 0 else 40)  # now and then a frame for blobs
    return ChainEvent(req_id=run, seq=seq, node_id=f"n{seq % 13}", phase="done",
                      output=f"{run}{seq}{pad}")


def _output(seq: int) -> bytes | None:
    return b"o" * 5000 if seq % 41 == 0 else None


class _LastSent:
    def __init__(self) -> None:
        self.last = 0
        self.full = False

    def send_frame_nowait(self, frame: bytes) -> None:
        message = chain_codec.decode(frame)
        assert message.seq == self.last + 1, (message.seq, self.last)
        self.last = message.seq

    async def wait_writable(self) -> None:
        return None


async def _write(path: str) -> None:
    from a2e_host.runtime.durable import DurableSink
    from a2e_host.store.sqlite import open_sqlite_store
    from tests.support.store import record

    store = await open_sqlite_store(path)
    sinks, outboxes = {}, {}
    for run in RUNS:
        store.create(record(run))
        sinks[run] = DurableSink(store, run, req_id=run)
        outboxes[run] = _LastSent()
        sinks[run].attach(outboxes[run])
    tick = 0
    while True:
        burst = BURSTS[tick % len(BURSTS)]
        tick += 1
        for _ in range(burst):  # one tick: the two runs interleaved frame by frame
            for run in RUNS:
                sink = sinks[run]
                seq = sink.position + 1
                sink.send_nowait(_event(run, seq), output=_output(seq))
        for run in RUNS:
            await sinks[run].wait_writable()
        await anyio.lowlevel.checkpoint()
        print("sent", *(outboxes[run].last for run in RUNS), flush=True)


def _write_until_killed(path: str) -> dict[str, int]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.store.test_crash_groups_attack", path],
        cwd=str(Path(__file__).resolve().parents[2]), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    sent = dict.fromkeys(RUNS, 0)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            sent = dict(zip(RUNS, map(int, line.split()[1:]), strict=True))
            if min(sent.values()) >= SENT_BEFORE_KILL:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err
    assert min(sent.values()) >= SENT_BEFORE_KILL, err
    return sent


@pytest.mark.timeout(180)
def test_a_killed_host_writing_groups_keeps_every_frame_it_sent(tmp_path: Path) -> None:
    path = str(tmp_path / "runs.db")
    sent = _write_until_killed(path)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    async def check() -> None:
        from a2e_host.store import open_store

        store = await open_store(path)
        try:
            for run in RUNS:
                seq = 0
                while page := await store.frames(run, after=seq, limit=700):
                    for stored in page:
                        seq += 1
                        assert stored.seq == seq
                        message = chain_codec.decode(stored.frame)
                        assert (message.req_id, message.seq) == (run, seq)
                        assert message.output == _event(run, seq).output
                        assert stored.node_id == f"n{seq % 13}"
                        assert stored.output == _output(seq)
                assert seq >= sent[run], (run, seq, sent[run])
        finally:
            await store.aclose()

    anyio.run(check, backend="asyncio")


if __name__ == "__main__":
    anyio.run(_write, sys.argv[1], backend="asyncio")
