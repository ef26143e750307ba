"""``python -m bench --quick`` runs every implementation and transport on small workloads
and verifies each result (correctness, not speed: speed is never asserted in tests); its
durable slot's log reads back gapless through the store and by ``chain/attach``, and its
durable map keeps every frame."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

# ~20 short processes, three at a time: ~5 s on an idle 2-core machine, about six times
# that on a very busy one; the bound leaves room for a much slower one.
QUICK_BENCH_TIMEOUT = 240.0


@pytest.mark.timeout(QUICK_BENCH_TIMEOUT + 30)  # longer than the global guard; see above
def test_quick_benchmark_runs_every_result_is_correct_and_durable_logs_replay_gapless(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=QUICK_BENCH_TIMEOUT,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    written = sorted(p.name for p in tmp_path.iterdir())
    assert any(name.endswith(".json") for name in written), written
    assert any(name.endswith(".md") for name in written), written
    report = json.loads(next(tmp_path.glob("*.json")).read_text(encoding="utf-8"))
    statuses = re.findall(r'"status": "(\w+)"', json.dumps(report))
    assert statuses and set(statuses) == {"ok"}, statuses
    assert "ours" in json.dumps(report["inprocess"]) and report["e2e"]
    # every implementation on every workload, and both hosts over both transports
    assert {k: sorted(v) for k, v in report["inprocess"].items()} == {
        k: sorted(report["inprocess"]["a"]) for k in "abcde"}
    assert {(x["host"], x["transport"], x["key"]) for x in report["e2e"]} == {
        (h, t, k) for h in ("reference", "ours") for t in ("stdio", "ws") for k in "abcde"}
    # the durable slot (a map of 300 items): every event of its last run read back
    # through frames(), seq 1..602 (else the measurement is an error), and replayed by
    # chain/attach on a new connection
    durable = report["inprocess"]["c"]["ours_durable"]
    assert (durable["units"], durable["events"]) == (300, 602)
    replay = durable["replay"]
    assert replay["frames"] == 602 and replay["replay_frames_per_s"] > 0
    assert replay["attach_frames_per_s"] > 0
    # the map in memory and durably: the right output, and the store holds the map's
    # start/done and each item's
    maps = {m["durable"]: m for m in report["durable_map"]}
    assert {d: (m["items"], m["status"], m["correct"]) for d, m in maps.items()} == {
        False: (2000, "ok", True), True: (2000, "ok", True)}
    assert maps[True]["frames_stored"] == 2 * 2000 + 2
    assert isinstance(maps[True]["store_mb"], float) and maps[True]["store_mb"] > 0
