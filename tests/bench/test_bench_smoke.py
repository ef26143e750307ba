"""``python -m bench --quick`` runs every implementation and transport on small workloads
and verifies each result (correctness, not speed: speed is never asserted in tests)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

# ~45 short measurement processes, three at a time: ~10 s on an idle 2-core machine,
# about three times that on a busy one; the bound leaves room for a much slower one.
QUICK_BENCH_TIMEOUT = 240.0


@pytest.mark.timeout(QUICK_BENCH_TIMEOUT + 30)  # longer than the global guard; see above
def test_quick_benchmark_runs_and_every_result_is_correct(tmp_path: Path) -> None:
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
