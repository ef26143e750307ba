"""``python -m bench.telemetry --quick`` runs each mode (hooks stubbed out, off, spans to
memory, node timing) on a small workload, checks every response, and reports the spans
the traced runs made (correctness: speed is never asserted in tests)."""

from __future__ import annotations

import json
import subprocess
import sys

from bench.telemetry import report_lines
from tests.support import REPO


def test_telemetry_bench_runs_every_mode_and_the_traced_run_makes_its_spans() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.telemetry", "--quick", "--workloads", "a,c"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.splitlines()[-1])
    a, c = result["workloads"]["a"], result["workloads"]["c"]
    assert sorted(a["median_s"]) == ["absent", "off", "on", "timing"]
    # workload a at its quick size: 50 nodes and the chain; c: the map, its first 10 items
    # and the chain (the other 290 items succeed: no span)
    assert (a["units"], a["spans_per_run"]) == (50, 51)
    assert (c["units"], c["spans_per_run"]) == (300, 12)
    assert result["off_hooks_ns_per_chain"] >= 0
    assert any(line.startswith("| a_linear_1000 |") for line in report_lines(result))
