"""The conformance kit's ``proc`` cases (conformance/cases/proc.jsonl) against our host
allowing ``cat``, over both transports, and against broken variants of it: each must
fail its named requirement. A host that does not allow ``cat`` gets the cases skipped."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from conformance.cases import load_cases
from tests.support import REPO
from tests.support.proc_mutant_host import MUTANTS
from tests.support.ws import serving_sync

HOST = [sys.executable, "-m", "a2e_host"]
KIT = [sys.executable, "-m", "conformance"]
KIT_TIMEOUT = 90.0
PROC_CASES = sorted(c.id for c in load_cases() if c.id.startswith("proc-")
                    and any(r.startswith("PROC-") for r in c.requires))


def run_kit(*args: str) -> dict[str, Any]:
    done = subprocess.run([*KIT, *args, "--json"], cwd=REPO, capture_output=True, text=True,
                          timeout=KIT_TIMEOUT)
    assert done.stdout, f"the kit printed nothing; stderr:\n{done.stderr[-3000:]}"
    report: dict[str, Any] = json.loads(done.stdout)
    report["exit_code"] = done.returncode
    return report


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["status"] for c in report["cases"] if c["id"] in PROC_CASES}


def selection() -> list[str]:
    return [arg for case in PROC_CASES for arg in ("-k", case)]


def test_every_proc_requirement_has_a_case() -> None:
    assert len(PROC_CASES) == 8
    covered = {r for c in load_cases() if c.id in PROC_CASES for r in c.requires}
    assert covered == {"PROC-GRANTED", "PROC-SPAWN", "PROC-WRITE-READ", "PROC-EXIT",
                       "PROC-KILL", "PROC-STATUS", "PROC-DENIED", "PROC-ERRORS", "PROC-LIMIT",
                       "PROC-CAPABILITY-MISSING"}


@pytest.mark.timeout(KIT_TIMEOUT + 30)
def test_our_host_allowing_cat_passes_the_proc_cases_over_stdio() -> None:
    host = " ".join([*HOST, "stdio", "--allow-proc", "cat"])
    report = run_kit("--stdio", host, *selection())
    assert statuses(report) == dict.fromkeys(PROC_CASES, "passed"), report["cases"]
    assert report["exit_code"] == 0


@pytest.mark.timeout(KIT_TIMEOUT + 30)
def test_our_host_allowing_cat_passes_the_proc_cases_over_websocket() -> None:
    with serving_sync([*HOST, "serve", "--port", "0", "--allow-proc", "cat"]) as url:
        report = run_kit("--ws", url, *selection())
    assert statuses(report) == dict.fromkeys(PROC_CASES, "passed"), report["cases"]
    assert report["exit_code"] == 0


@pytest.mark.timeout(KIT_TIMEOUT + 30)
def test_a_host_not_allowing_cat_gets_the_proc_cases_skipped() -> None:
    with serving_sync([*HOST, "serve", "--port", "0", "--tools", "conformance"]) as url:
        report = run_kit("--ws", url, *selection())
    assert statuses(report) == dict.fromkeys(PROC_CASES, "skipped")
    assert report["exit_code"] == 0


@pytest.mark.timeout(KIT_TIMEOUT + 30)
@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_every_broken_proc_host_fails_its_named_requirement(mutant: str) -> None:
    _, requirement = MUTANTS[mutant]
    argv = [sys.executable, "-m", "tests.support.proc_mutant_host", mutant, "serve",
            "--port", "0", "--allow-proc", "cat"]
    with serving_sync(argv) as url:
        report = run_kit("--ws", url, *selection())
    failed = {r["id"] for r in report["requirements"] if r["status"] == "failed"}
    assert report["exit_code"] == 1
    assert requirement in failed, f"{mutant} should fail {requirement}; failed: {failed}"
    # the kit fails it for its defect only: the refusals still pass
    assert statuses(report)["proc-denied-executable"] == "passed"
