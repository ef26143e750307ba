"""The kit's spec level against a second, independent host: the public SDK's, through
conformance/adapters/a2e_sdk_stdio.py (issue 21, "Prove it on two hosts").

The SDK is not on the package registry and is never copied into the project: the test
extracts the commit the README's worked example records from a bare clone of it
(:data:`SDK_REPO`, or ``CONFORMANCE_SDK_REPO``) into a temporary directory, and runs the SDK's
host under this Python (its dependencies, pydantic, fastapi, requests and pyyaml, are
in the ``test`` extra). Without that clone on the machine there is nothing to run the
adapter against, and the test is skipped saying so; everything else fails loudly.
"""

from __future__ import annotations

import asyncio
import io
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conformance.cases import load_cases
from conformance.manifest import case_level, load_requirements
from conformance.report import json_report, level_scores, runner_errors
from conformance.suite import Target, requirements_by_id, run_suite
from tests.support import REPO

SDK_REPO = Path(os.environ.get("CONFORMANCE_SDK_REPO",
                               "/work/.mirror/a2eprotocol+python-sdk/repo"))
README = REPO / "conformance" / "README.md"
ADAPTER = REPO / "conformance" / "adapters" / "a2e_sdk_stdio.py"


def recorded_commit() -> str:
    """The SDK commit the README's worked example records its verdicts against."""
    found = re.search(r"Verdicts recorded against SDK commit `([0-9a-f]{40})`",
                      README.read_text(encoding="utf-8"))
    assert found, "conformance/README.md names the SDK commit of its verdicts"
    return found.group(1)


def recorded_spec_failures() -> set[str]:
    """The requirements of the README's table of spec-level failures of the SDK host."""
    text = README.read_text(encoding="utf-8")
    table = text[text.index("Every spec-level failure"):text.index("What it does that the spec")]
    return set(re.findall(r"^\| `(SPEC-[A-Z-]+)`", table, flags=re.M))


@pytest.fixture(scope="module")
def sdk_checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not SDK_REPO.is_dir():
        pytest.skip(f"no clone of the public A2E python SDK at {SDK_REPO} "
                    f"(set CONFORMANCE_SDK_REPO)")
    # only the package: the repository's large media files may be absent from a mirror
    archive = subprocess.run(["git", "--git-dir", str(SDK_REPO), "archive", "--format=tar",
                              recorded_commit(), "a2e"],
                             capture_output=True, check=True, timeout=60)
    target = tmp_path_factory.mktemp("a2e-sdk")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        if hasattr(tarfile, "data_filter"):  # Python 3.11.4+: refuse links out of target
            tar.extractall(target, filter="data")
        else:
            tar.extractall(target)  # our own archive of a known commit
    return target


@pytest.mark.timeout(120)
def test_the_sdk_host_fails_the_spec_level_only_for_its_recorded_defects(
        sdk_checkout: Path) -> None:
    by_id = requirements_by_id()
    cases = [c for c in load_cases() if case_level(c, by_id) == "spec"]
    command = f"{sys.executable} {ADAPTER} --sdk {sdk_checkout}"
    results = asyncio.run(run_suite(cases, Target("stdio", command, patience=3.0)))
    assert runner_errors(results) == []
    assert len(results) == len(cases) >= 30
    report = json_report(load_requirements(), results, "stdio")
    failed = {r["id"]: r for r in report["requirements"]
              if r["status"] == "failed" and by_id[r["id"]].level == "spec"}
    # every failure is one of the host's defects the worked example lists, each one found
    assert set(failed) == recorded_spec_failures()
    spec = [r for r in load_requirements() if r.level == "spec"]
    assert {label: (row["passed"], row["failed"]) for label, row in
            level_scores(spec, results).items()} == {
        "spec MUST": (13, 14), "spec SHOULD": (0, 1)}
    # the transport and event defects these cases met beside (judged at their own level)
    # are those the worked example reports once
    beside = {r["id"] for r in report["requirements"]
              if r["status"] == "failed" and by_id[r["id"]].level != "spec"}
    assert beside == {"FRAME-STDIO", "CHAIN-EVT-SEQ", "CHAIN-RESP-OUTPUTS",
                      "CHAIN-RESP-ERROR", "CHAIN-RESP-NODES-RUN"}
    text = README.read_text(encoding="utf-8")
    paragraph = text[text.index("Defects reported once"):text.index("The protocol level fails")]
    assert all(f"`{rid}`" in paragraph for rid in beside), paragraph
    # and cites the spec line it breaks
    lines = (REPO / "docs" / "chains-spec.txt").read_text(encoding="utf-8").splitlines()
    for rid in failed:
        assert by_id[rid].spec_lines, rid
        assert all(lines[n - 1].strip() for n in by_id[rid].spec_lines), rid
    # a failed case says what it saw, not only that it failed
    assert all(r.problems for r in results if r.status == "failed")
