"""``python -m bench.map_memory``: memory of a map over 100,000 items against 10,000.

Each size runs in a fresh process: one ``chain/req`` mapping the ``bench`` pack's ``noop``
over ``input.items``, through a host's public in-memory connection (``bench.impl_ours``),
events received into a sink that counts and drops them. Printed per size (JSON): peak RSS
added over the baseline (MB), the most asyncio tasks alive at once (sampled every
millisecond), wall seconds and whether the output was right. The claim under test: memory
and tasks are bounded by ``max_map_concurrency`` (64), not by the item count — beyond the
request and the map's own output list, which grow with it by necessity.
"""

from __future__ import annotations

import asyncio
import json
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


async def _child(n: int) -> dict[str, Any]:
    from a2e_host.config import HostConfig
    from a2e_host.logs import configure_logging
    from a2e_host.runtime.host import Host
    from bench.impl_ours import connection_call

    configure_logging("json", "warning")
    request = json.dumps({
        "type": "chain/req", "id": f"map-{n}", "entry_node": "m",
        "initial_input": {"items": list(range(n))},
        "nodes": [
            {"node_id": "m", "kind": "map", "items_path": "input.items", "map_node": "t"},
            {"node_id": "t", "kind": "tool", "name": "noop", "input_map": {"x": "item"}},
        ],
    }).encode()
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
    return {
        "items": n,
        "correct": response["success"] and output == list(range(n)) and events == 2 * n + 3,
        "peak_rss_added_mb": round(_rss_mb() - base, 1),
        "most_tasks_alive": most_tasks,
        "wall_s": round(wall, 3),
    }


def main(argv: list[str]) -> int:
    if argv:
        print(json.dumps(asyncio.run(_child(int(argv[0])))))
        return 0
    ok = True
    for n in SIZES:
        done = subprocess.run([sys.executable, "-m", "bench.map_memory", str(n)], cwd=ROOT,
                              capture_output=True, text=True, timeout=900)
        line = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "{}"
        print(line)
        ok = ok and done.returncode == 0 and json.loads(line).get("correct", False)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
