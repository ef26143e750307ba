"""Run-store micro-benchmark: ``python -m bench.store [--events N] [--runs R] [--json]``.

Appends ``N`` frames of 214 bytes over ``R`` interleaved runs through the SQLite run
store (``a2e_host.store``) the way a durable run does (``append`` never awaited; the
producer waits only when the store is over its ceiling), for ``synchronous=NORMAL`` and
``FULL`` (DURABILITY.md §3.1's table, re-measured here):

- ``saturated``: as fast as the producer can go (group commit takes everything queued):
  events/s, wall µs/event, CPU µs/event of the whole process and of the writer thread
  alone (``/proc/self/task/<tid>/stat``), commits and the mean batch size.
- ``paced``: at a fixed rate (2,000 and 20,000 events/s, the latter also with
  ``commit_delay`` 1 ms): the latency from ``append`` to the commit callback on the loop
  (p50 / p99, ms), batch size and writer CPU per event.
- ``replay``: paging a run's log back with ``frames(after, limit=1000)``: µs/event.

Every store lives in a fresh temporary folder; nothing is kept. Figures are noisy on a
shared machine: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections import deque
from typing import Any

import anyio

from a2e_host.store import RunRecord, StoredFrame
from a2e_host.store.sqlite import SQLiteRunStore, open_sqlite_store

FRAME_BYTES = 214


def _frame(run: int, seq: int) -> bytes:
    head = (f'{{"type":"chain/event","req_id":"r{run}","seq":{seq},'
            f'"node_id":"n{seq}","phase":"done","output":"').encode()
    return head + b"x" * (FRAME_BYTES - len(head) - 2) + b'"}'


def _thread_cpu(native_id: int) -> float:
    """CPU seconds (user + system) of one thread of this process."""
    with open(f"/proc/self/task/{native_id}/stat", encoding="ascii") as file:
        fields = file.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _open(folder: str, durability: str, commit_delay: float = 0.0) -> SQLiteRunStore:
    store = await open_sqlite_store(os.path.join(folder, "runs.db"), durability=durability,
                                    commit_delay=commit_delay)
    return store


def _writer_id(store: SQLiteRunStore) -> int:
    writer = store._writer
    assert writer is not None and writer._thread.native_id is not None
    return writer._thread.native_id


async def saturated(durability: str, events: int, runs: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        store = await _open(folder, durability)
        commits = 0

        def counted(_: int) -> None:
            nonlocal commits
            commits += 1

        store.on_commit(counted)
        for run in range(runs):
            store.create(RunRecord(run_id=f"r{run}", principal="bench", req_id=f"r{run}"))
        await store.flush()
        commits = 0
        frames = [[_frame(run, seq) for seq in range(1, events // runs + 1)]
                  for run in range(runs)]
        tid = _writer_id(store)
        cpu0, writer0, t0 = time.process_time(), _thread_cpu(tid), time.perf_counter()
        for seq in range(1, events // runs + 1):
            for run in range(runs):
                store.append(f"r{run}", StoredFrame(seq, f"n{seq}", "done",
                                                    frames[run][seq - 1]))
            if store.full:
                await store.wait_writable()
            elif seq % 8 == 0:
                await anyio.lowlevel.checkpoint()  # let commit reports in, as a loop does
        await store.flush()
        wall = time.perf_counter() - t0
        cpu, writer_cpu = time.process_time() - cpu0, _thread_cpu(tid) - writer0
        total = (events // runs) * runs
        replay = await _replay(store, "r0", events // runs)
        await store.aclose()
    return {
        "durability": durability, "events": total, "runs": runs,
        "events_per_s": round(total / wall), "wall_us_per_event": round(wall * 1e6 / total, 2),
        "cpu_us_per_event": round(cpu * 1e6 / total, 2),
        "writer_cpu_us_per_event": round(writer_cpu * 1e6 / total, 2),
        "commits": commits, "mean_batch": round(total / max(commits, 1), 1),
        "replay_us_per_event": replay,
    }


async def _replay(store: SQLiteRunStore, run_id: str, count: int) -> float:
    t0 = time.perf_counter()
    after = 0
    while page := await store.frames(run_id, after=after, limit=1000):
        after = page[-1].seq
    assert after == count, (after, count)
    return round((time.perf_counter() - t0) * 1e6 / count, 2)


async def paced(durability: str, rate: int, seconds: float, runs: int,
                commit_delay: float = 0.0) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        store = await _open(folder, durability, commit_delay)
        for run in range(runs):
            store.create(RunRecord(run_id=f"r{run}", principal="bench", req_id=f"r{run}"))
        await store.flush()
        sent: deque[tuple[int, float]] = deque()  # (ticket, when appended), in order
        latencies: list[float] = []
        commits = 0

        def committed(ticket: int) -> None:
            nonlocal commits
            commits += 1
            now = time.perf_counter()
            while sent and sent[0][0] <= ticket:
                latencies.append(now - sent.popleft()[1])

        store.on_commit(committed)
        tid = _writer_id(store)
        writer0 = _thread_cpu(tid)
        total = int(rate * seconds)
        step = 0.001  # send a 1 ms slice of frames per tick
        per_tick = max(1, rate // 1000)
        t0 = time.perf_counter()
        seq = 0
        sent_count = 0
        while sent_count < total:
            seq += 1
            for i in range(per_tick):
                run = (sent_count + i) % runs
                ticket = store.append(f"r{run}", StoredFrame(seq * per_tick + i, "n", "done",
                                                             _frame(run, seq)))
                sent.append((ticket, time.perf_counter()))
            sent_count += per_tick
            target = t0 + sent_count / rate
            delay = target - time.perf_counter()
            await anyio.sleep(max(0.0, min(delay, step)))
        await store.flush()
        writer_cpu = _thread_cpu(tid) - writer0
        await store.aclose()
    latencies.sort()
    return {
        "durability": durability, "rate": rate, "commit_delay_ms": commit_delay * 1000,
        "events": sent_count, "commits": commits,
        "mean_batch": round(sent_count / max(commits, 1), 1),
        "latency_p50_ms": round(statistics.median(latencies) * 1000, 3),
        "latency_p99_ms": round(latencies[int(len(latencies) * 0.99) - 1] * 1000, 3),
        "writer_cpu_us_per_event": round(writer_cpu * 1e6 / sent_count, 2),
    }


async def main_async(events: int, runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {"load_average": os.getloadavg(), "frame_bytes": FRAME_BYTES,
                           "saturated": [], "paced": []}
    for durability in ("normal", "full"):
        out["saturated"].append(await saturated(durability, events, runs))
    for durability in ("normal", "full"):
        out["paced"].append(await paced(durability, 2_000, 2.0, runs))
        out["paced"].append(await paced(durability, 20_000, 1.0, runs))
        out["paced"].append(await paced(durability, 20_000, 1.0, runs, commit_delay=0.001))
    return out


def markdown(result: dict[str, Any]) -> str:
    lines = [f"load average {result['load_average']}, frames of {result['frame_bytes']} B",
             "", "| saturated | events/s | wall µs/event | CPU µs/event | writer CPU µs/event "
             "| commits | mean batch | replay µs/event |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["saturated"]:
        lines.append(f"| {r['durability']} ({r['events']} over {r['runs']} runs) | "
                     f"{r['events_per_s']} | {r['wall_us_per_event']} | "
                     f"{r['cpu_us_per_event']} | {r['writer_cpu_us_per_event']} | "
                     f"{r['commits']} | {r['mean_batch']} | {r['replay_us_per_event']} |")
    lines += ["", "| paced | events/s | commit_delay ms | p50 ms | p99 ms | mean batch "
              "| writer CPU µs/event |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in result["paced"]:
        lines.append(f"| {r['durability']} | {r['rate']} | {r['commit_delay_ms']} | "
                     f"{r['latency_p50_ms']} | {r['latency_p99_ms']} | {r['mean_batch']} | "
                     f"{r['writer_cpu_us_per_event']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.store", description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args()
    result = anyio.run(main_async, args.events, args.runs, backend="asyncio")
    print(json.dumps(result) if args.json else markdown(result))


if __name__ == "__main__":
    main()
