"""A host killed with ``kill -9`` mid-write (issue 17: "a crash never reuses a seq a client
has seen"): the store reopens with every frame it reported committed, gapless, intact,
and no torn row."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from a2e_host.store import open_store
from tests.support import REPO
from tests.support.store import frame_bytes
from tests.support.store_writer import RUNS, output_of

COMMITTED_BEFORE_KILL = 3000  # seq every run has reached when the writer is killed


def _write_until_killed(path: str, durability: str) -> int:
    """Start the writer, kill -9 it once it reported this many commits; return the last
    ``seq`` it reported committed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.store_writer", path, durability],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reported = 0
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            reported = int(line.split()[1])
            if reported >= COMMITTED_BEFORE_KILL:
                break
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL, err
    assert reported >= COMMITTED_BEFORE_KILL, err
    return reported


@pytest.mark.timeout(180)
@pytest.mark.parametrize("durability", ["normal", "full"])
def test_a_killed_writer_leaves_a_gapless_intact_prefix(tmp_path: Path, durability: str
                                                          ) -> None:
    path = str(tmp_path / "runs.db")
    reported = _write_until_killed(path, durability)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"

    async def check() -> None:
        store = await open_store(path)  # recovers the WAL; the dead writer's lock is gone
        try:
            assert {r.run_id for r in await store.unfinished()} == set(RUNS)
            for run_id in RUNS:
                seq = 0
                while page := await store.frames(run_id, after=seq, limit=500):
                    for stored in page:
                        seq += 1
                        assert stored.seq == seq
                        size = 9000 if seq % 10 == 0 else 100
                        assert stored.frame == frame_bytes(run_id, seq, size)
                        assert stored.output == output_of(run_id, seq)
                assert seq >= reported
                record = await store.get(run_id)
                assert record is not None and record.last_seq == seq
        finally:
            await store.aclose()

    anyio.run(check, backend="asyncio")
