"""``python -m bench --quick`` runs every implementation and transport on small workloads
and verifies each result (correctness, not speed: speed is never asserted in tests)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_quick_benchmark_runs_and_every_result_is_correct(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    written = sorted(p.name for p in tmp_path.iterdir())
    assert any(name.endswith(".json") for name in written), written
    assert any(name.endswith(".md") for name in written), written
    report = json.loads(next(tmp_path.glob("*.json")).read_text(encoding="utf-8"))
    statuses = re.findall(r'"status": "(\w+)"', json.dumps(report))
    assert statuses and set(statuses) == {"ok"}, statuses
    assert "ours" in json.dumps(report["inprocess"]) and report["e2e"]
