"""``python -m bench.map_memory [--durable] [N ...]``: memory of a map over 100,000 items
against 10,000, in memory and as a durable run.

Each size runs in a fresh process: one ``chain/req`` mapping the ``bench`` pack's ``noop``
over ``input.items``, through a host's public in-memory connection (``bench.impl_ours``),
events received into a sink that counts and drops them. With ``--durable`` the host keeps
a SQLite run store (``synchronous=NORMAL``, in a temporary directory) and the request is
``durable`` (``bench.durable``): every frame is committed to the store before it is sent.
Printed per size (one JSON line): ``items``, ``durable``, peak RSS added over the
baseline (MB), the most asyncio tasks alive at once (sampled every millisecond), wall
seconds, whether the output was right, and for a durable run the frames stored and the
store's size on disk (MB). The claim under test: memory and tasks are bounded by
``max_map_concurrency`` (64), not by the item count — beyond the request and the map's own
output list, which grow with it by necessity — and a durable run's writes queue no more
than the store's ``max_pending`` frames (backpressure), so durability adds a bounded
amount, not one that grows with the items.

``python -m bench.map_memory [N ...]`` runs each size (default 10,000 and 100,000) in
memory, then each durably; ``--durable`` only durably. Exit status 1 when a result was
wrong.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SIZES = (10_000, 100_000)
ROOT = Path(__file__).resolve().parent.parent


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _child(n: int, durable: bool) -> dict[str, Any]:
    from a2e_host.config import HostConfig
    from a2e_host.logs import configure_logging
    from a2e_host.runtime.host import Host
    from bench import durable as durable_runs
    from bench.impl_ours import Unavailable, connection_call

    configure_logging("json", "warning")
    request = json.dumps({
        "type": "chain/req", "id": f"map-{n}", "entry_node": "m",
        "initial_input": {"items": list(range(n))},
        "nodes": [
            {"node_id": "m", "kind": "map", "items_path": "input.items", "map_node": "t"},
            {"node_id": "t", "kind": "tool", "name": "noop", "input_map": {"x": "item"}},
        ],
    }, separators=(",", ":")).encode()
    if durable:
        try:
            call = durable_runs.load()
        except Unavailable as exc:
            return {"items": n, "durable": True, "status": "unavailable", "reason": str(exc)}
    else:
        call = connection_call(Host(HostConfig(tools=("bench",))))
    events = 0

    def sink(_: bytes) -> None:
        nonlocal events
        events += 1

    most_tasks = 0
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal most_tasks
        while not done.is_set():
            most_tasks = max(most_tasks, len(asyncio.all_tasks()))
            await asyncio.sleep(0.001)

    base = _rss_mb()
    watcher = asyncio.create_task(watch())
    started = time.perf_counter()
    response = json.loads(await call(request, sink))
    wall = time.perf_counter() - started
    done.set()
    await watcher
    output = response["final_output"]
    result: dict[str, Any] = {
        "items": n,
        "durable": durable,
        "status": "ok",
        "correct": response["success"] and output == list(range(n)) and events == 2 * n + 3,
        "peak_rss_added_mb": round(_rss_mb() - base, 1),
        "most_tasks_alive": most_tasks,
        "wall_s": round(wall, 3),
    }
    if durable:
        replay = await durable_runs.replay_figure()
        result["frames_stored"] = replay.get("frames", 0)
        result["store_mb"] = round(_store_bytes(durable_runs.store_path()) / 2**20, 1)
    return result


def _store_bytes(path: str) -> int:
    """The store's file, WAL and shared-memory index, in bytes."""
    return sum(os.path.getsize(path + suffix) for suffix in ("", "-wal", "-shm")
               if os.path.exists(path + suffix))


def run_sizes(sizes: list[int], durable: bool) -> list[dict[str, Any]]:
    """Each size in a fresh process; one result per size (``status: failed`` when the
    process printed none)."""
    results = []
    for n in sizes:
        argv = [sys.executable, "-m", "bench.map_memory", "--child", str(n)]
        done = subprocess.run(argv + (["--durable"] if durable else []), cwd=ROOT,
                              capture_output=True, text=True, timeout=900)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
        if done.returncode != 0 or not lines:
            tail = done.stderr.strip().splitlines()[-3:]
            results.append({"items": n, "durable": durable, "status": "failed",
                            "error": f"exit {done.returncode}: {' / '.join(tail)}"})
        else:
            results.append(json.loads(lines[-1]))
    return results


def main(argv: list[str]) -> int:
    durable = "--durable" in argv
    args = [a for a in argv if a != "--durable"]
    if args and args[0] == "--child":
        print(json.dumps(asyncio.run(_child(int(args[1]), durable))))
        return 0
    sizes = [int(a) for a in args] or list(SIZES)
    results = (run_sizes(sizes, True) if durable
               else run_sizes(sizes, False) + run_sizes(sizes, True))
    ok = True
    for res in results:
        print(json.dumps(res))
        ok = ok and res.get("status") in ("ok", "unavailable") and res.get("correct", True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
