"""The conformance kit's durable-run cases against the real host: run with a store they
pass; without one the host does not advertise ``chain/durable`` and they are skipped."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support import REPO
from tests.support.durable import SERVE_CONFORMANCE
from tests.support.ws import serving_sync

KIT = [sys.executable, "-m", "conformance"]
DURABLE_CASES = {
    "durable-accepted-first", "durable-attach-after-disconnect",
    "durable-attach-from-the-start", "durable-idempotency-key-attaches",
    "durable-idempotency-key-conflict",
    "durable-cancel-from-another-connection", "durable-errors",
    "runs-get-and-list-statuses", "durable-detach-keeps-running",
    "durable-retention-within-the-ceiling", "durable-run-expired",
}


def _kit(url: str, *flags: str) -> dict[str, Any]:
    done = subprocess.run([*KIT, "--ws", url, "-k", "durable-", "-k", "runs-get-", "--json",
                           *flags], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.stdout, done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_the_durable_cases_pass_against_a_host_with_a_store(tmp_path: Path) -> None:
    config = tmp_path / "host.toml"
    config.write_text("[store]\nprune_interval = 1\n", encoding="utf-8")
    argv = [*SERVE_CONFORMANCE, "--store", str(tmp_path / "runs.db"), "--config", str(config)]
    with serving_sync(argv) as url:
        report = _kit(url, "--fast-prune")
    assert {c["id"]: c["status"] for c in report["cases"]} == dict.fromkeys(
        DURABLE_CASES, "passed")


def test_the_run_expired_case_is_skipped_unless_the_host_prunes_quickly(tmp_path: Path) -> None:
    with serving_sync([*SERVE_CONFORMANCE, "--store", str(tmp_path / "runs.db")]) as url:
        report = _kit(url)
    assert {c["id"]: c["status"] for c in report["cases"]} == {
        **dict.fromkeys(DURABLE_CASES, "passed"), "durable-run-expired": "skipped"}


def test_the_durable_cases_are_skipped_by_a_host_without_a_store() -> None:
    with serving_sync(SERVE_CONFORMANCE) as url:
        report = _kit(url)
    assert {c["id"]: c["status"] for c in report["cases"]} == dict.fromkeys(
        DURABLE_CASES, "skipped")
