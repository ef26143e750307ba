"""The conformance kit against our host, over both transports, at every level; against
broken variants of it (each must fail a named requirement, and only the cases that show
it); and against a host that answers garbage (the runner never crashes).

The kit runs in this process (``run_suite``): a subprocess per run only added a Python
start-up. Time bounds: a full run over stdio starts a few dozen host processes, so it
carries its own ``pytest.mark.timeout`` above pytest's global guard.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance.cases import load_cases, load_file
from conformance.cli import select
from conformance.manifest import LEVELS, case_level, load_requirements
from conformance.report import defects, json_report, level_scores, runner_errors
from conformance.runner import CaseResult
from conformance.suite import (
    Probe,
    SharedSession,
    Target,
    not_offered,
    probe_host,
    requirements_by_id,
    run_case,
    run_suite,
    session_key,
    skip_reason,
)
from tests.support import REPO
from tests.support.extensionless_host import HIDDEN_CEILINGS, HIDDEN_FEATURES
from tests.support.mutant_host import MUTANTS, PROC_MUTANTS, STDIO_MUTANTS, STORE_MUTANTS
from tests.support.ws import serving_sync

HOST = [sys.executable, "-m", "a2e_host"]
SKILLS = str(REPO / "conformance" / "skills")
#: Our host with everything the kit can exercise without a run store (over stdio each
#: case group is a process of its own, and a store is one process's).
FULL = ["--tools", "conformance", "--allow-proc", "cat", "--allow-proc", "sleep",
        "--skills", SKILLS]
STDIO_HOST = " ".join([*HOST, "stdio", "--tools", "conformance"])
# The whole kit over stdio: ~15 s on an idle 2-core machine, several times that when the
# machine is busy; the bound leaves room for a much slower one.
FULL_KIT_TIMEOUT = 240

#: Cases every broken host must still pass: the kit fails a host for its defect, not
#: for everything (none of them runs a chain, which is where the defects are).
UNRELATED = ("ping-pong", "error-parse-not-json", "error-unknown-type")
#: Which cases to run against each broken host: the cases built to catch its defect,
#: else its requirement's cases (with cycles accepted, most cyclic chains would wait
#: forever for nodes that never become ready: one refused-too-late case shows it).
MUTANT_CASES = {
    "cycle_accepted": ("cycle-two-nodes",),
    "progress_as_status": ("retry-flaky-until-it-succeeds",),
    "timeout_unenforced": ("spec-timeout-last-node-overruns",),
    "early_end_drops_work": ("spec-timeout-keeps-work-done",),
    "map_template_input_dropped": ("spec-map-template-keeps-its-input",),
    "map_failed_items_dropped": ("map-template-skip-null-item",),
    "proc_exit_code_ignored": ("node-proc-exit-code",),
    "proc_timeout_ignored": ("node-proc-timeout-kill",),
    "prints_on_stdout": ("spec-tool-output",),
}


#: The kit's own waits (a host's start-up, a handshake) times this: the suite runs on a
#: loaded 2-core machine where a host process can take seconds to start. A case's own
#: bounds (``within``: what the protocol promises) are never scaled.
PATIENCE = 3.0


def run(cases: list[Any], target: Target, **options: Any) -> list[CaseResult]:
    patient = Target(target.transport, target.address, patience=PATIENCE)
    return asyncio.run(run_suite(cases, patient, **options))


def failures(results: list[CaseResult]) -> list[str]:
    return [f"{r.case.id} ({', '.join(r.case.requires)}): {r.problems[:3]}"
            for r in results if r.status == "failed"]


def statuses(results: list[CaseResult]) -> dict[str, str]:
    return {r.case.id: r.status for r in results}


def failed_requirements(results: list[CaseResult]) -> set[str]:
    report = json_report(load_requirements(), results, "?")
    return {r["id"] for r in report["requirements"] if r["status"] == "failed"}


def assert_every_level_passes(results: list[CaseResult]) -> dict[str, dict[str, int]]:
    """Nothing failed, at any level; no finding, no runner error; every level judged."""
    assert failures(results) == []
    assert defects(results) == {}
    assert runner_errors(results) == []
    scores = level_scores(load_requirements(), results)
    assert {label: row["failed"] for label, row in scores.items()} == dict.fromkeys(
        scores, 0)
    assert set(scores) == {"spec MUST", "spec SHOULD", "protocol", "decision", "extension"}
    # every spec requirement is judged against our host, none skipped
    assert scores["spec MUST"]["passed"] == 27 and scores["spec SHOULD"]["passed"] == 1
    return scores


@pytest.mark.timeout(FULL_KIT_TIMEOUT + 30)
def test_our_host_passes_every_level_over_stdio() -> None:
    host = " ".join([*HOST, "stdio", *FULL])
    results = run(load_cases(), Target("stdio", host))
    scores = assert_every_level_passes(results)
    assert scores["protocol"]["passed"] >= 120
    assert scores["extension"]["passed"] >= 40
    # cases took turns on shared sessions and none had to be replaced: every case that
    # leaves its session unusable says so in its header
    assert {r.case.id: r.notes for r in results if r.notes} == {}


@pytest.mark.timeout(FULL_KIT_TIMEOUT + 30)
def test_our_host_passes_every_level_over_websocket(tmp_path: Path) -> None:
    argv = [*HOST, "serve", "--port", "0", *FULL, "--store", str(tmp_path / "runs.db")]
    with serving_sync(argv) as url:
        results = run(load_cases(), Target("ws", url))
    scores = assert_every_level_passes(results)
    assert scores["protocol"]["passed"] >= 120
    assert scores["extension"]["passed"] >= 55  # durable runs too


def test_the_spec_level_selects_only_cases_judging_spec_requirements() -> None:
    by_id = requirements_by_id()
    spec_cases = [c for c in load_cases() if case_level(c, by_id) == "spec"]
    assert len(spec_cases) >= 30
    assert all(by_id[rid].level == "spec" for c in spec_cases for rid in c.requires)
    # every spec requirement cites lines of the spec and says how binding it is
    spec = [r for r in by_id.values() if r.level == "spec"]
    lines = (REPO / "docs" / "chains-spec.txt").read_text(encoding="utf-8").splitlines()
    for requirement in spec:
        assert requirement.binding in ("MUST", "SHOULD")
        assert all(lines[n - 1].strip() for n in requirement.spec_lines), requirement.id
    assert {r.level for r in by_id.values()} == set(LEVELS)
    assert all(r.feature for r in by_id.values() if r.level == "extension")


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_every_broken_host_fails_a_named_requirement(mutant: str, tmp_path: Path) -> None:
    _, requirement = MUTANTS[mutant]
    flags = ["--tools", "conformance"]
    if mutant in STORE_MUTANTS:
        flags += ["--store", str(tmp_path / "runs.db")]
    if mutant in PROC_MUTANTS:
        flags += ["--allow-proc", "cat", "--allow-proc", "sleep"]
    selection = select(load_cases(), [*MUTANT_CASES.get(mutant, (requirement,)), *UNRELATED])
    module = [sys.executable, "-m", "tests.support.mutant_host", mutant]
    if mutant in STDIO_MUTANTS:
        results = run(selection, Target("stdio", " ".join([*module, "stdio", *flags])))
    else:
        with serving_sync([*module, "serve", "--port", "0", *flags]) as url:
            results = run(selection, Target("ws", url))
    assert requirement in failed_requirements(results), (
        f"mutant {mutant!r} should fail {requirement}; failed were "
        f"{sorted(failed_requirements(results))}: {failures(results)}")
    assert {case: statuses(results)[case] for case in UNRELATED} == dict.fromkeys(
        UNRELATED, "passed")
    assert runner_errors(results) == []


def test_a_stray_event_is_one_defect_not_a_failure_of_every_case() -> None:
    # a stray event after every chain/resp breaks an event invariant: it is reported
    # once, against CHAIN-EVT-BEFORE-RESP, and each case is judged on its own property
    argv = [sys.executable, "-m", "tests.support.mutant_host", "event_after_response",
            "serve", "--port", "0", "--tools", "conformance"]
    with serving_sync(argv) as url:
        results = run(select(load_cases(), ["branch-true-side", "spec-tool-output",
                                            "ping-pong"]), Target("ws", url))
    assert statuses(results) == {"branch-true-side": "passed", "spec-tool-output": "passed",
                                 "ping-pong": "passed"}
    found = defects(results)
    assert sorted(found) == ["CHAIN-EVT-BEFORE-RESP", "SPEC-EVENTS-BEFORE-RESP"]
    assert sorted(found["CHAIN-EVT-BEFORE-RESP"]["cases"]) == ["branch-true-side",
                                                            "spec-tool-output"]
    assert {"CHAIN-EVT-BEFORE-RESP", "SPEC-EVENTS-BEFORE-RESP"} <= failed_requirements(results)


def test_seq_always_zero_fails_the_seq_requirements_once_and_nothing_else() -> None:
    argv = [sys.executable, "-m", "tests.support.mutant_host", "seq_not_incremented",
            "serve", "--port", "0", "--tools", "conformance"]
    chosen = ["spec-next-node-runs-after", "spec-branch-true", "branch-true-side",
              "spec-event-seq"]
    with serving_sync(argv) as url:
        results = run(select(load_cases(), chosen), Target("ws", url))
    seq_cases = {r.case.id for r in results if {"CHAIN-EVT-SEQ", "SPEC-EVENT-SEQ"}
                 & set(r.case.requires)}
    assert {r.case.id: r.status for r in results if r.case.id not in seq_cases} == (
        dict.fromkeys((c for c in statuses(results) if c not in seq_cases), "passed"))
    assert failed_requirements(results) == {"CHAIN-EVT-SEQ", "SPEC-EVENT-SEQ"}
    resequenced = [r for r in results if any("re-sequenced" in n for n in r.notes)]
    assert resequenced, "the other cases say their events were re-sequenced"


def test_a_failed_case_on_a_shared_session_does_not_poison_the_next() -> None:
    # final_output taken from the first terminal node: that case fails; the session
    # answered everything it sent, so it is drained and the next cases run on it
    host = (f"{sys.executable} -m tests.support.mutant_host final_output_first_terminal "
            "stdio --tools conformance")
    chosen = ["final-output-last-terminal-declared", "spec-tool-output", "error-unknown-type"]
    session_cases = select(load_cases(), chosen)
    results = run(session_cases, Target("stdio", host), jobs=1, shared=1)
    assert [r.case.id for r in results] == [c.id for c in session_cases]
    assert statuses(results) == {"final-output-last-terminal-declared": "failed",
                                 "spec-tool-output": "passed", "error-unknown-type": "passed"}
    assert all(not r.notes for r in results), [r.notes for r in results]


def test_the_runner_never_crashes_on_a_host_answering_garbage() -> None:
    # the four limits cases that once crashed on a missing probe_limits, every spec
    # case, and the core messages: each is judged (failed or not offered), none crashes
    host = f"{sys.executable} -m tests.support.garbage_host"
    by_id = requirements_by_id()
    chosen = [c for c in load_cases()
              if case_level(c, by_id) == "spec" or c.source.startswith("limits.jsonl")
              or c.id.startswith(("error-", "handshake-", "version-"))]
    results = run(chosen, Target("stdio", host), jobs=8)
    assert runner_errors(results) == []
    assert len(results) == len(chosen) >= 60
    assert all(r.problems for r in results if r.status != "passed")
    assert sum(r.status == "failed" for r in results) >= 50
    # the host publishes no limits it can be held to: the cases that read them are
    # "not offered" rather than crashing on a missing probe_limits
    limits_cases = {r.case.id: r for r in results if r.case.source.startswith("limits.")}
    crashed_before = ("max-timeout-host-refusal", "max-timeout-tie-names-broader",
                      "raised-timeout-still-refused", "limits-cannot-be-raised")
    assert {c: (limits_cases[c].status, limits_cases[c].offered) for c in crashed_before} == (
        dict.fromkeys(crashed_before, ("skipped", False)))
    # and the JSON report of it all is JSON
    json.dumps(json_report(load_requirements(), results, "stdio"))


#: The requirements of this host's extensions: their cases are gated on what the host
#: publishes (conformance/cases/budgets.jsonl, extensions.jsonl).
EXTENSION_REQUIREMENTS = ("LIMIT-BUDGETS-PUBLISHED", "LIMIT-MAX-EXPRESSION-STEPS",
                          "LIMIT-MAX-EXPRESSION-BYTES", "LIMIT-MAX-CHAIN-OUTPUT",
                          "LIMIT-MAX-TOTAL-NODES", "CHAIN-REQ-INCLUDE-OUTPUTS",
                          "CHAIN-REQ-EVENT-OUTPUTS", "CHAIN-REQ-TIMEOUT-DEFAULT",
                          "CANCEL-IMMEDIATE", "RECOVERY-RETRY", "RECOVERY-NOT-RETRYABLE",
                          "RECOVERY-RETRY-ON", "RECOVERY-TIMEOUT", "RECOVERY-FALLBACK",
                          "RECOVERY-CACHE", "RECOVERY-INVALID", "RECOVERY-MAX-ATTEMPTS")


def test_a_case_is_not_offered_when_the_host_does_not_advertise_what_it_needs() -> None:
    by_id = {c.id: c for c in load_cases()}
    target = Target("ws", "ws://127.0.0.1:9")
    base = {"max_nodes": 10000, "max_timeout": 3600}
    budgets = dict.fromkeys(HIDDEN_CEILINGS, 1000)
    bare = Probe({}, (), base, ("chains",))
    full = Probe({}, HIDDEN_FEATURES, {**base, **budgets}, ("chains",))
    assert skip_reason(by_id["total-nodes-at-ceiling"], target, bare) == (
        "host does not advertise handshake/limits")
    assert skip_reason(by_id["total-nodes-at-ceiling"], target, Probe(
        {}, ("handshake/limits",), base, ("chains",))) == (
        "host does not publish the ceiling max_total_nodes")
    assert skip_reason(by_id["include-outputs-false"], target, bare) == (
        "host does not advertise chain/req.include_outputs")
    gated = [c for c in by_id.values() if set(c.requires) & set(EXTENSION_REQUIREMENTS)]
    assert len(gated) >= 15
    assert [c.id for c in gated if not_offered(c, bare) is None] == []
    assert {c.id: skip_reason(c, target, full) for c in gated} == dict.fromkeys(
        c.id for c in gated)
    # a case lowering a base ceiling needs handshake/limits, not the budgets
    assert skip_reason(by_id["max-nodes-session-refusal"], target, Probe(
        {}, ("handshake/limits",), base, ("chains",))) is None


def test_a_case_reading_an_unpublished_ceiling_is_not_offered_and_never_crashes() -> None:
    # raised-timeout-still-refused's handshake adds 1 to probe_limits.max_timeout: with
    # the ceiling unpublished it once raised TypeError out of the whole run
    case = next(c for c in load_cases() if c.id == "raised-timeout-still-refused")
    target = Target("ws", "ws://127.0.0.1:9")
    advertised = Probe({}, ("handshake/limits",), {}, ("chains",))
    assert session_key(case, target, advertised) is None
    assert not_offered(case, advertised) == "host does not publish the ceiling max_timeout"


def test_a_host_without_the_extensions_gets_their_cases_not_offered_not_failed() -> None:
    argv = [sys.executable, "-m", "tests.support.extensionless_host", "serve", "--port", "0",
            "--tools", "conformance"]
    controls = ("ping-pong", "limits-published", "spec-tool-output")
    cases = load_cases()
    selection = select(cases, [*EXTENSION_REQUIREMENTS, *controls, "max-nodes-session-refusal"])
    with serving_sync(argv) as url:
        results = run(selection, Target("ws", url))
    assert failures(results) == []
    seen = {r.case.id: (r.status, r.offered) for r in results}
    gated = {c.id for c in cases if set(c.requires) & set(EXTENSION_REQUIREMENTS)}
    gated.add("max-nodes-session-refusal")  # lowers a ceiling: handshake/limits is hidden
    assert {case: seen.get(case) for case in gated} == dict.fromkeys(gated, ("skipped", False))
    assert {case: seen.get(case) for case in controls} == dict.fromkeys(
        controls, ("passed", True))
    reasons = {r.case.id: r.problems for r in results}
    assert reasons["event-outputs-false"] == ["host does not advertise chain/req.event_outputs"]
    statuses_by_requirement = json_report(load_requirements(), results, "ws")["requirements"]
    assert {r["id"]: r["status"] for r in statuses_by_requirement
            if r["id"] in ("CHAIN-REQ-EVENT-OUTPUTS", "RECOVERY-RETRY")} == {
        "CHAIN-REQ-EVENT-OUTPUTS": "not_offered", "RECOVERY-RETRY": "not_offered"}


@pytest.fixture(scope="module")
def our_probe() -> Probe:
    """What our host advertises over stdio (one probe for the in-process tests)."""
    return asyncio.run(probe_host(Target("stdio", STDIO_HOST, patience=PATIENCE)))


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
    target = Target("stdio", STDIO_HOST, patience=PATIENCE)
    results = await run_suite(cases, target, jobs=1, shared=1, probe=our_probe)
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
    target, probe = Target("stdio", STDIO_HOST, patience=PATIENCE), our_probe
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
