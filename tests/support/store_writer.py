"""A process that writes a run store until it is killed: ``python -m
tests.support.store_writer PATH DURABILITY``.

It appends frames of three interleaved runs (every tenth one big enough to go to
``blobs``, with an output), and after each commit prints one line ``committed N`` with the
highest ``seq`` committed for every run. The crash test ``kill -9``s it and checks the
file holds at least that much, gapless and intact.
"""

from __future__ import annotations

import sys

import anyio

from a2e_host.store import StoredFrame, open_store
from tests.support.store import frame_bytes, record

RUNS = ("a", "b", "c")


def output_of(run_id: str, seq: int) -> bytes:
    return f'{{"out":"{run_id}{seq}"}}'.encode() * (300 if seq % 10 == 0 else 1)


async def main(path: str, durability: str) -> None:
    store = await open_store(path, durability="full" if durability == "full" else "normal")
    for run_id in RUNS:
        store.create(record(run_id))
    seq = 0
    while True:
        for _ in range(50):
            seq += 1
            for run_id in RUNS:
                size = 9000 if seq % 10 == 0 else 100
                store.append(run_id, StoredFrame(seq, "n", "done", frame_bytes(run_id, seq, size),
                                                 output_of(run_id, seq)))
        await store.flush()
        print(f"committed {seq}", flush=True)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], backend="asyncio")
