"""The conformance kit against our host, over both transports, and against broken
variants of it (each must fail a named requirement)."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.mutant_host import MUTANTS

REPO = Path(__file__).resolve().parent.parent
HOST = [sys.executable, "-m", "a2e_host"]
KIT = [sys.executable, "-m", "conformance"]
START_TIMEOUT = 30.0
SUITE_TIMEOUT = 600.0


@contextmanager
def serving(argv: list[str]) -> Iterator[str]:
    """Start a WebSocket host on a free loopback port; yield its URL; stop it."""
    proc = subprocess.Popen(
        argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.put(line)

    pumping = threading.Thread(target=pump, daemon=True)
    pumping.start()
    try:
        url = ""
        while not url:
            line = lines.get(timeout=START_TIMEOUT)
            if match := re.search(r"listening on (ws://\S+)", line):
                url = match.group(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
        pumping.join(timeout=15)
        assert proc.stderr is not None
        proc.stderr.close()


def run_kit(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [*KIT, *args, "--json"], cwd=REPO, capture_output=True, text=True,
        timeout=SUITE_TIMEOUT,
    )
    assert done.stdout, f"the kit printed nothing; stderr:\n{done.stderr[-3000:]}"
    report: dict[str, Any] = json.loads(done.stdout)
    report["exit_code"] = done.returncode
    return report


def failures(report: dict[str, Any]) -> list[str]:
    return [
        f"{c['id']} ({', '.join(c['requires'])}): {c['problems'][:2]}"
        for c in report["cases"]
        if c["status"] == "failed"
    ]


def test_our_host_passes_the_kit_over_stdio() -> None:
    report = run_kit("--stdio", " ".join([*HOST, "stdio", "--tools", "conformance"]))
    assert failures(report) == []
    assert report["summary"]["failed"] == 0
    assert report["summary"]["passed"] >= 200
    assert report["exit_code"] == 0


def test_our_host_passes_the_kit_over_websocket() -> None:
    with serving([*HOST, "serve", "--port", "0", "--tools", "conformance"]) as url:
        report = run_kit("--ws", url)
    assert failures(report) == []
    assert report["summary"]["failed"] == 0
    assert report["summary"]["passed"] >= 200
    assert report["exit_code"] == 0


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_every_broken_host_fails_a_named_requirement(mutant: str) -> None:
    _, requirement = MUTANTS[mutant]
    argv = [sys.executable, "-m", "tests.mutant_host", mutant, "serve", "--port", "0",
            "--tools", "conformance"]
    with serving(argv) as url:
        report = run_kit("--ws", url)
    failed = {r["id"] for r in report["requirements"] if r["status"] == "failed"}
    assert report["exit_code"] == 1
    assert requirement in failed, (
        f"mutant {mutant!r} should fail {requirement}; failed were {sorted(failed)}"
    )
