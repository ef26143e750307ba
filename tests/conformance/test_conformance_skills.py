"""The conformance kit's skill cases (issue 15): our host passes them when started with
the kit's fixture skills, skips them (never fails) without, and broken variants of the
skill capability each fail a named requirement."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.support import REPO
from tests.support.mutant_skill_host import MUTANTS
from tests.support.ws import serving_sync

HOST = [sys.executable, "-m", "a2e_host"]
KIT = [sys.executable, "-m", "conformance"]
KIT_TIMEOUT = 90.0
SKILL_REQUIREMENTS = ("SKILL-DISCOVER", "SKILL-CALL", "SKILL-VERSIONS", "SKILL-LIFECYCLE",
                      "SKILL-UNKNOWN", "SKILL-CAPABILITY-MISSING")


def skills_dir() -> str:
    done = subprocess.run([*KIT, "--skills-dir"], cwd=REPO, capture_output=True, text=True,
                          timeout=30, check=True)
    return done.stdout.strip()


def run_kit(*args: str) -> dict[str, Any]:
    done = subprocess.run([*KIT, *args, "--json"], cwd=REPO, capture_output=True, text=True,
                          timeout=KIT_TIMEOUT)
    assert done.stdout, f"the kit printed nothing; stderr:\n{done.stderr[-3000:]}"
    report: dict[str, Any] = json.loads(done.stdout)
    report["exit_code"] = done.returncode
    return report


def selection() -> list[str]:
    return [arg for r in SKILL_REQUIREMENTS for arg in ("-k", r)]


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["status"] for c in report["cases"]}


def test_our_host_with_the_fixture_skills_passes_every_skill_case() -> None:
    argv = [*HOST, "serve", "--port", "0", "--tools", "conformance", "--skills", skills_dir()]
    with serving_sync(argv) as url:
        report = run_kit("--ws", url, *selection())
    assert report["exit_code"] == 0
    seen = statuses(report)
    assert len(seen) == 8
    assert set(seen.values()) == {"passed"}
    passed = {r["id"] for r in report["requirements"] if r["status"] == "passed"}
    assert set(SKILL_REQUIREMENTS) <= passed


def test_a_host_without_the_fixture_skills_gets_the_skill_cases_skipped() -> None:
    with serving_sync([*HOST, "serve", "--port", "0", "--tools", "conformance"]) as url:
        report = run_kit("--ws", url, *selection())
    assert report["exit_code"] == 0
    assert set(statuses(report).values()) == {"skipped"}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_every_broken_skill_capability_fails_a_named_requirement(mutant: str) -> None:
    _, requirement, cases = MUTANTS[mutant]
    argv = [sys.executable, "-m", "tests.support.mutant_skill_host", mutant, "serve",
            "--port", "0", "--tools", "conformance", "--skills", skills_dir()]
    with serving_sync(argv) as url:
        report = run_kit("--ws", url, *(arg for c in (*cases, "skill-call-unknown-skill")
                                         for arg in ("-k", c)))
    failed = {r["id"] for r in report["requirements"] if r["status"] == "failed"}
    assert report["exit_code"] == 1
    assert requirement in failed, f"{mutant} should fail {requirement}; failed: {failed}"
    assert statuses(report)["skill-call-unknown-skill"] == "passed"
