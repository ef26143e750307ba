"""The conformance kit against our host, over both transports, and against broken
variants of it (each must fail a named requirement, and only the cases that show it).

Time bounds: each kit run is a subprocess with its own timeout, and a test that may
take longer than pytest's global guard (pyproject ``timeout``) says so with its own
``pytest.mark.timeout``, a little above the subprocess bound so the subprocess's
clearer failure comes first.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance.cases import load_cases, load_file
from conformance.suite import (
    Probe,
    SharedSession,
    Target,
    probe_host,
    run_case,
    run_suite,
    session_key,
    skip_reason,
)
from tests.support import REPO
from tests.support.extensionless_host import HIDDEN_CEILINGS, HIDDEN_FEATURES
from tests.support.mutant_host import MUTANTS, STORE_MUTANTS
from tests.support.ws import serving_sync

HOST = [sys.executable, "-m", "a2e_host"]
KIT = [sys.executable, "-m", "conformance"]
STDIO_HOST = " ".join([*HOST, "stdio", "--tools", "conformance"])
# The whole kit over stdio: ~20 s on an idle 2-core machine, about three times that
# when the machine is busy; the bound leaves room for a much slower one.
FULL_KIT_TIMEOUT = 240.0
# A few cases against one server: seconds.
SMALL_KIT_TIMEOUT = 90.0

#: Cases every broken host must still pass: the kit fails a host for its defect, not
#: for everything (none of them runs a chain, which is where the defects are).
UNRELATED = ("ping-pong", "error-parse-not-json", "error-unknown-type")
#: Which cases to run against each broken host: its requirement's cases, except where
#: some of those would only time out (with cycles accepted, a cyclic chain waits
#: forever for nodes that never become ready; one refused-too-late case shows it).
MUTANT_CASES = {"cycle_accepted": ("cycle-two-nodes",),
                "progress_as_status": ("retry-flaky-until-it-succeeds",)}


def run_kit(*args: str, timeout: float = SMALL_KIT_TIMEOUT) -> dict[str, Any]:
    done = subprocess.run(
        [*KIT, *args, "--json"], cwd=REPO, capture_output=True, text=True, timeout=timeout,
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


def statuses(report: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["status"] for c in report["cases"]}


def notes(report: dict[str, Any]) -> dict[str, list[str]]:
    return {c["id"]: c["notes"] for c in report["cases"] if c["notes"]}


@pytest.mark.timeout(FULL_KIT_TIMEOUT + 30)  # the whole kit over stdio; see FULL_KIT_TIMEOUT
def test_our_host_passes_the_kit_over_stdio() -> None:
    report = run_kit("--stdio", STDIO_HOST, timeout=FULL_KIT_TIMEOUT)
    assert failures(report) == []
    assert report["summary"]["failed"] == 0
    assert report["summary"]["passed"] >= 200
    assert report["exit_code"] == 0
    # cases took turns on shared sessions and none had to be replaced: every case that
    # leaves its session unusable says so in its header
    assert notes(report) == {}


def test_our_host_passes_the_kit_over_websocket() -> None:
    with serving_sync([*HOST, "serve", "--port", "0", "--tools", "conformance"]) as url:
        report = run_kit("--ws", url)
    assert failures(report) == []
    assert report["summary"]["failed"] == 0
    assert report["summary"]["passed"] >= 200
    assert report["exit_code"] == 0


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_every_broken_host_fails_a_named_requirement(mutant: str, tmp_path: Path) -> None:
    _, requirement = MUTANTS[mutant]
    argv = [sys.executable, "-m", "tests.support.mutant_host", mutant, "serve", "--port", "0",
            "--tools", "conformance"]
    if mutant in STORE_MUTANTS:
        argv += ["--store", str(tmp_path / "runs.db")]
    selection = [*MUTANT_CASES.get(mutant, (requirement,)), *UNRELATED]
    with serving_sync(argv) as url:
        report = run_kit("--ws", url, *(arg for p in selection for arg in ("-k", p)))
    failed = {r["id"] for r in report["requirements"] if r["status"] == "failed"}
    assert report["exit_code"] == 1
    assert requirement in failed, (
        f"mutant {mutant!r} should fail {requirement}; failed were {sorted(failed)}"
    )
    assert {case: statuses(report)[case] for case in UNRELATED} == dict.fromkeys(
        UNRELATED, "passed")


def test_a_failed_case_on_a_shared_session_does_not_poison_the_next() -> None:
    # With a stray event after every chain/resp, the branch case fails; the session
    # it ran on is replaced, and the cases after it on the same (single) lane pass.
    host = (f"{sys.executable} -m tests.support.mutant_host event_after_response stdio"
            " --tools conformance")
    report = run_kit("--stdio", host, "--shared", "1", "-j", "1",
                     "-k", "branch-true-side", "-k", "ping-pong", "-k", "error-unknown-type")
    order = [c["id"] for c in report["cases"]]
    assert order == ["branch-true-side", "ping-pong", "error-unknown-type"]
    assert statuses(report) == {"branch-true-side": "failed", "ping-pong": "passed",
                                "error-unknown-type": "passed"}
    failed = next(c for c in report["cases"] if c["id"] == "branch-true-side")
    assert any(p.startswith("CHAIN-EVT-BEFORE-RESP") for p in failed["problems"])
    replaced = notes(report)
    assert list(replaced) == ["branch-true-side"]
    assert "closed its host process after this case (the case failed" in replaced[
        "branch-true-side"][0]


#: The requirements of this host's extensions: their cases are gated on what the host
#: publishes (conformance/cases/budgets.jsonl, extensions.jsonl).
EXTENSION_REQUIREMENTS = ("LIMIT-BUDGETS-PUBLISHED", "LIMIT-MAX-EXPRESSION-STEPS",
                          "LIMIT-MAX-EXPRESSION-BYTES", "LIMIT-MAX-CHAIN-OUTPUT",
                          "LIMIT-MAX-TOTAL-NODES", "CHAIN-REQ-INCLUDE-OUTPUTS",
                          "CHAIN-REQ-EVENT-OUTPUTS", "CHAIN-REQ-TIMEOUT-DEFAULT",
                          "CANCEL-IMMEDIATE", "RECOVERY-RETRY", "RECOVERY-NOT-RETRYABLE",
                          "RECOVERY-RETRY-ON", "RECOVERY-TIMEOUT", "RECOVERY-FALLBACK",
                          "RECOVERY-CACHE", "RECOVERY-INVALID", "RECOVERY-MAX-ATTEMPTS")


def test_a_case_is_skipped_when_the_host_does_not_publish_its_ceiling_or_feature() -> None:
    by_id = {c.id: c for c in load_cases()}
    target = Target("ws", "ws://127.0.0.1:9")
    base = {"max_nodes": 10000, "max_timeout": 3600}
    budgets = dict.fromkeys(HIDDEN_CEILINGS, 1000)
    bare = Probe({}, (), base, ("chains",))
    full = Probe({}, HIDDEN_FEATURES, {**base, **budgets}, ("chains",))
    assert skip_reason(by_id["total-nodes-refused-before-running"], target, bare) == (
        "host does not publish the ceiling max_total_nodes")
    assert skip_reason(by_id["budget-ceilings-cannot-be-raised"], target, Probe(
        {}, (), {**base, "max_total_nodes": 5}, ("chains",))) == (
        "host does not publish the ceiling max_expression_steps, max_expression_bytes, "
        "max_chain_output_bytes")
    assert skip_reason(by_id["include-outputs-false"], target, bare) == (
        "host does not advertise chain/req.include_outputs")
    gated = [c for c in by_id.values() if set(c.requires) & set(EXTENSION_REQUIREMENTS)]
    assert len(gated) >= 15
    assert [c.id for c in gated if skip_reason(c, target, bare) is None] == []
    assert {c.id: skip_reason(c, target, full) for c in gated} == dict.fromkeys(
        c.id for c in gated)
    # a case about the base ceilings is not gated on the budgets
    assert skip_reason(by_id["max-nodes-session-refusal"], target, bare) is None


def test_a_host_without_the_extensions_gets_their_cases_skipped_not_failed() -> None:
    argv = [sys.executable, "-m", "tests.support.extensionless_host", "serve", "--port", "0",
            "--tools", "conformance"]
    controls = ("ping-pong", "limits-published", "max-nodes-session-refusal")
    selection = [*EXTENSION_REQUIREMENTS, *controls]
    with serving_sync(argv) as url:
        report = run_kit("--ws", url, *(arg for p in selection for arg in ("-k", p)))
    assert failures(report) == []
    assert report["exit_code"] == 0
    seen = statuses(report)
    gated = {c.id for c in load_cases() if set(c.requires) & set(EXTENSION_REQUIREMENTS)}
    assert {case: seen.get(case) for case in gated} == dict.fromkeys(gated, "skipped")
    assert {case: seen.get(case) for case in controls} == dict.fromkeys(controls, "passed")
    reasons = {c["id"]: c["problems"] for c in report["cases"]}
    assert reasons["total-nodes-at-ceiling"] == [
        "host does not publish the ceiling max_total_nodes"]
    assert reasons["event-outputs-false"] == ["host does not advertise chain/req.event_outputs"]


@pytest.fixture(scope="module")
def our_probe() -> Probe:
    """What our host advertises over stdio (one probe for the in-process tests)."""
    return asyncio.run(probe_host(Target("stdio", STDIO_HOST)))


@pytest.mark.asyncio
async def test_a_case_leaving_a_chain_unanswered_gets_its_session_replaced(
        tmp_path: Path, our_probe: Probe) -> None:
    # The first case sends a 1 s chain and ends without waiting for it; were the
    # session kept, its chain/resp would land in the second case as a stray message.
    cases_file = tmp_path / "leftover.jsonl"
    sleep = {"type": "chain/req", "streaming": False, "entry_node": "s",
             "nodes": [{"node_id": "s", "kind": "tool", "name": "sleep",
                        "input": {"seconds": 1.0}}]}
    echo = {"type": "chain/req", "entry_node": "e",
            "nodes": [{"node_id": "e", "kind": "tool", "name": "echo", "input": {"x": 1}}]}
    lines = [
        {"case": "leaves-a-chain-running", "requires": ["FIX-SLEEP"]},
        {"send": sleep, "as": "r"},
        {"case": "runs-after-it", "requires": ["FIX-ECHO"]},
        {"send": echo, "as": "r"},
        {"expect_chain": {"response": {"success": True, "outputs": {"e": {"x": 1}}}},
         "for": "r"},
    ]
    cases_file.write_text("".join(json.dumps(line) + "\n" for line in lines),
                          encoding="utf-8")
    cases = load_file(cases_file)
    results = await run_suite(cases, Target("stdio", STDIO_HOST), jobs=1, shared=1,
                              probe=our_probe)
    assert [(r.case.id, r.status) for r in results] == [
        ("leaves-a-chain-running", "passed"), ("runs-after-it", "passed")]
    assert len(results[0].notes) == 1
    assert "got no chain/resp or error" in results[0].notes[0]
    assert results[1].notes == []


@pytest.mark.asyncio
async def test_cases_with_the_same_handshake_take_turns_on_one_host_process(
        our_probe: Probe) -> None:
    by_id = {c.id: c for c in load_cases()}
    lowered = [by_id["max-nodes-session-refusal"], by_id["max-nodes-counts-declared-templates"]]
    target, probe = Target("stdio", STDIO_HOST), our_probe
    keys = {session_key(c, target, probe) for c in lowered}
    assert len(keys) == 1 and None not in keys
    assert session_key(by_id["ping-pong"], target, probe) not in keys
    assert session_key(by_id["eof-finishes-chains-stdio"], target, probe) is None
    session = SharedSession("t")
    try:
        results = [await run_case(case, target, probe, session) for case in lowered]
        assert [(r.status, r.notes) for r in results] == [("passed", []), ("passed", [])]
        assert (session.opened, session.cases) == (1, 2)
    finally:
        await session.aclose()
