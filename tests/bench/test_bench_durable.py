"""The benchmark's durable slot runs: a durable workload is verified like any other, its log
reads back gapless through the store, and a durable map keeps every frame (correctness
only; speed is never asserted in tests)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.support import REPO

TIMEOUT = 120.0


def _json_lines(*argv: str) -> list[dict[str, object]]:
    done = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_durable_map_workload_is_verified_and_its_log_replays_gapless() -> None:
    (result,) = _json_lines("-m", "bench.measure", "ours_durable", "c", "--size", "300",
                            "--runs", "1", "--warmup", "0")
    assert result["status"] == "ok", result
    assert (result["impl"], result["units"], result["events"]) == ("ours_durable", 300, 602)
    replay = result["replay"]
    assert isinstance(replay, dict)
    # every event of the last run read back through frames(), seq 1..602, and replayed
    # by chain/attach on a new connection (else the measurement is an error)
    assert replay["frames"] == 602 and replay["replay_frames_per_s"] > 0
    assert replay["attach_frames_per_s"] > 0


def test_durable_map_stores_every_event_and_returns_the_right_output() -> None:
    (result,) = _json_lines("-m", "bench.map_memory", "--durable", "3000")
    assert result["status"] == "ok", result
    assert (result["items"], result["durable"], result["correct"]) == (3000, True, True)
    assert result["frames_stored"] == 2 * 3000 + 2  # the map's start/done, each item's
    assert isinstance(result["store_mb"], float) and result["store_mb"] > 0
