"""A 100,000-item map runs durably with bounded memory (issue 17): every frame is stored,
the output is right, the tasks alive stay bounded by ``max_map_concurrency`` (64), and
what durability adds to the peak RSS over the same map in memory is a bounded amount, not
one that grows with the items (``python -m bench.map_memory``, each run in a fresh
process; bounds generous for a loaded 2-core machine, README measures +7–11 MB)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.support import REPO

ITEMS = 100_000


def _measure(*flags: str) -> dict[str, Any]:
    """One size in a fresh process (the benchmark's own child mode): its JSON line."""
    done = subprocess.run([sys.executable, "-m", "bench.map_memory", "--child", str(ITEMS),
                           *flags], cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("{")]
    result: dict[str, Any] = json.loads(line)
    return result


@pytest.mark.timeout(600)
def test_a_100000_item_map_runs_durably_with_bounded_memory_and_tasks() -> None:
    durable = _measure("--durable")
    assert (durable["status"], durable["correct"], durable["items"]) == ("ok", True, ITEMS)
    assert durable["frames_stored"] == 2 * ITEMS + 2
    assert durable["most_tasks_alive"] <= 2 * 64
    in_memory = _measure()
    assert (in_memory["status"], in_memory["correct"]) == ("ok", True)
    added = durable["peak_rss_added_mb"] - in_memory["peak_rss_added_mb"]
    assert added < 64, (durable, in_memory)
