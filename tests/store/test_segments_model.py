"""The SQLite store against a model: three runs' frames appended in random batches (runs
interleaved in one batch, batches longer than a segment, frames and outputs over the blob
threshold between small ones, a ``seq`` skipped and appended later, a ``seq`` appended
again), the store reopened now and then and the writer's remembered runs forgotten
between batches; every page read back must be the model's frames after ``after``, each
``seq`` once, in order (issue 17, "A run store")."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from a2e_host.store import StoredFrame
from a2e_host.store import _writer as writer_module
from a2e_host.store.sqlite import open_sqlite_store
from tests.support.store import frame_bytes, record, stored_seqs

THRESHOLD = 200
RUNS = ("r0", "r1", "r2")


@pytest.mark.asyncio
@pytest.mark.parametrize(("seed", "max_keys"), [(1, 100_000), (2, 100_000), (3, 2)])
async def test_random_batches_read_back_as_the_model_has_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int, max_keys: int) -> None:
    monkeypatch.setattr(writer_module, "MAX_KEYS", max_keys)
    rnd = random.Random(seed)
    path = str(tmp_path / "runs.db")
    model: dict[str, dict[int, StoredFrame]] = {run: {} for run in RUNS}
    following = dict.fromkeys(RUNS, 1)  # the next new seq of each run
    skipped: dict[str, list[int]] = {run: [] for run in RUNS}
    store = await open_sqlite_store(path, blob_threshold=THRESHOLD)
    pages = 0
    try:
        for run in RUNS:
            store.create(record(run))
        for _ in range(150):
            choice = rnd.random()
            if choice < 0.7:
                run = rnd.choice(RUNS)
                for _ in range(rnd.choice([1, 2, 5, 30, 1100])):
                    seq = following[run]
                    draw = rnd.random()
                    if draw < 0.03 and seq > 1:
                        seq = rnd.randint(1, seq - 1)  # stored already (or skipped)
                    elif draw < 0.05:
                        skipped[run].append(seq)
                        seq += 1
                        following[run] += 2
                    elif draw < 0.15 and skipped[run]:
                        seq = skipped[run].pop()
                    else:
                        following[run] += 1
                    stored = StoredFrame(
                        seq, f"n{seq % 5}", "done",
                        frame_bytes(run, seq, rnd.choice([0, 0, 0, THRESHOLD + 100])),
                        rnd.choice([None, None, b'{"o":1}', b"y" * (THRESHOLD + 50)]))
                    model[run].setdefault(seq, stored)
                    store.append(run, stored)
            elif choice < 0.92:
                await store.flush()
                run = rnd.choice(RUNS)
                after = rnd.randint(0, following[run])
                limit = rnd.choice([1, 2, 3, 7, 1000, 5000])
                got = await store.frames(run, after=after, limit=limit)
                want = [model[run][seq] for seq in sorted(model[run]) if seq > after][:limit]
                assert got == want
                pages += 1
                found = await store.get(run)
                assert found is not None and found.last_seq == max(model[run], default=0)
            else:
                await store.flush()
                await store.aclose()
                store = await open_sqlite_store(path, blob_threshold=THRESHOLD)
        await store.flush()
        for run in RUNS:
            got = await store.frames(run, limit=100_000)
            assert got == [model[run][seq] for seq in sorted(model[run])]
    finally:
        await store.aclose()
    for run in RUNS:
        assert stored_seqs(path, run) == sorted(model[run])  # each seq stored once
    assert pages > 10
