"""The conformance kit is complete: every requirement has a case, every case a requirement.

Source: conformance/README.md (requirement-driven kit); STYLE.md "Tests and habits".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cases import CASES_DIR, STEP_KINDS, Case, CaseError, load_cases, load_file
from conformance.manifest import (
    README,
    case_level,
    coverage_problems,
    gating_features,
    load_requirements,
    readme_with_table,
    render_markdown,
)
from conformance.report import json_report, level_scores, markdown_report
from conformance.results import CaseResult
from tests.support import REPO


@pytest.fixture(scope="module")
def requirements():
    return load_requirements()


@pytest.fixture(scope="module")
def cases():
    return load_cases()


def test_every_requirement_has_a_case_and_every_case_a_known_requirement(requirements, cases):
    assert coverage_problems(requirements, cases) == []


def test_coverage_check_reports_missing_and_unknown_requirements(requirements, cases):
    first = cases[0]
    orphan = [c for c in cases if requirements[0].id not in c.requires]
    problems = coverage_problems(requirements, orphan)
    assert f"requirement {requirements[0].id} has no case" in problems
    bogus = first.__class__(id="x", requires=("NO-SUCH-RULE",), doc="", steps=(), source="t")
    assert "case x names unknown requirement NO-SUCH-RULE" in coverage_problems(
        requirements, [*cases, bogus])


def test_suite_is_large_enough_to_cover_the_spec(requirements, cases):
    assert len(cases) >= 100
    assert len(requirements) >= 80


def test_case_ids_are_unique_across_files(cases):
    ids = [c.id for c in cases]
    assert len(ids) == len(set(ids))


def test_every_case_file_line_is_json_with_one_step_kind():
    for path in CASES_DIR.glob("*.jsonl"):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            obj = json.loads(line)
            if "case" not in obj:
                assert sum(k in obj for k in STEP_KINDS) == 1, f"{path.name}:{number}"


def test_exempt_requirements_say_why(requirements):
    for requirement in requirements:
        if requirement.exempt:
            assert len(requirement.exempt) > 20, requirement.id


def test_readme_requirement_table_is_regenerated(requirements, cases):
    text = README.read_text(encoding="utf-8")
    expected = readme_with_table(text, render_markdown(requirements, cases))
    assert text == expected, "run: python -m conformance --update-readme"


def test_a_step_before_any_case_is_rejected(tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"send": {"type": "ping"}}\n', encoding="utf-8")
    with pytest.raises(CaseError, match="before any case header"):
        load_file(bad)


def test_a_case_without_requirements_is_rejected(tmp_path: Path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"case": "x", "requires": []}\n', encoding="utf-8")
    with pytest.raises(CaseError, match="names no requirement"):
        load_file(bad)


def test_a_gate_given_as_a_string_instead_of_a_list_is_rejected(tmp_path: Path):
    # "max_total_nodes" as a string would otherwise gate on its 15 letters
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"case": "x", "requires": ["R"], "ceilings": "max_total_nodes"}\n',
                   encoding="utf-8")
    with pytest.raises(CaseError, match="ceilings must be a list of strings"):
        load_file(bad)


#: Requirements about this host's extensions (PROTOCOL.md, DECISIONS.md; not the seed) and
#: the gate every case naming one must carry, so a host without it skips the case.
EXTENSION_GATES = {
    "LIMIT-MAX-EXPRESSION-STEPS": ("ceilings", "max_expression_steps"),
    "LIMIT-MAX-EXPRESSION-BYTES": ("ceilings", "max_expression_bytes"),
    "LIMIT-MAX-CHAIN-OUTPUT": ("ceilings", "max_chain_output_bytes"),
    "LIMIT-MAX-TOTAL-NODES": ("ceilings", "max_total_nodes"),
    "CHAIN-REQ-INCLUDE-OUTPUTS": ("features", "chain/req.include_outputs"),
    "CHAIN-REQ-EVENT-OUTPUTS": ("features", "chain/req.event_outputs"),
    "CHAIN-REQ-TIMEOUT-DEFAULT": ("features", "handshake/limits"),
    "CANCEL-IMMEDIATE": ("features", "chain/cancel"),
    "RECOVERY-RETRY": ("features", "chain/node.retry"),
    "RECOVERY-NOT-RETRYABLE": ("features", "chain/node.retry"),
    "RECOVERY-RETRY-ON": ("features", "chain/node.retry"),
    "RECOVERY-TIMEOUT": ("features", "chain/node.timeout"),
    "RECOVERY-FALLBACK": ("features", "chain/node.fallback"),
    "RECOVERY-CACHE": ("features", "chain/cache"),
    "RECOVERY-INVALID": ("features", "chain/node.retry"),
    "RECOVERY-MAX-ATTEMPTS": ("ceilings", "max_attempts"),
}
BUDGET_CEILINGS = {"max_expression_steps", "max_expression_bytes", "max_chain_output_bytes",
                   "max_total_nodes"}


def test_every_case_about_an_extension_is_gated_on_it(cases):
    ungated = []
    for case in cases:
        for requirement in case.requires:
            if requirement in EXTENSION_GATES:
                kind, name = EXTENSION_GATES[requirement]
                if name not in getattr(case, kind):
                    ungated.append(f"{case.id}: {requirement} needs {kind} {name}")
        if "LIMIT-BUDGETS-PUBLISHED" in case.requires:
            lowered = set(case.steps[0]["send"].get("limits") or {})
            if not lowered <= set(case.ceilings) or not case.ceilings:
                ungated.append(f"{case.id}: lowers {sorted(lowered)}, gated on "
                               f"{list(case.ceilings)}")
            if not set(case.ceilings) <= BUDGET_CEILINGS:
                ungated.append(f"{case.id}: gated on {list(case.ceilings)}")
    assert ungated == []
    named = {r for case in cases for r in case.requires}
    assert set(EXTENSION_GATES) | {"LIMIT-BUDGETS-PUBLISHED"} <= named


def test_selection_by_pattern_matches_case_ids_and_requirements():
    by_id = load_cases(pattern="cycle-self-loop")
    assert [c.id for c in by_id] == ["cycle-self-loop"]
    by_requirement = load_cases(pattern="VAL-CYCLE")
    assert {"cycle-two-nodes", "cycle-self-loop"} <= {c.id for c in by_requirement}


def test_kit_never_imports_a_host_implementation():
    package = REPO / "conformance"
    for source in package.glob("*.py"):
        text = source.read_text(encoding="utf-8")
        assert "import a2e_host" not in text and "from a2e_host" not in text, source.name


def test_cli_lists_cases_and_prints_the_manifest(capsys):
    from conformance.cli import main

    assert main(["--list", "-k", "cycle-self-loop"]) == 0
    assert capsys.readouterr().out.split() == ["cycle-self-loop", "VAL-CYCLE"]
    assert main(["--requirements"]) == 0
    assert "| `CHAIN-EVT-SEQ` |" in capsys.readouterr().out


def test_cli_without_a_host_is_a_usage_error(capsys):
    from conformance.cli import main

    assert main([]) == 2
    assert "--stdio" in capsys.readouterr().err


def test_cases_that_close_reconnect_or_handshake_themselves_get_their_own_connection(
        tmp_path: Path):
    path = tmp_path / "c.jsonl"
    lines = [
        {"case": "plain", "requires": ["CORE-PING"]},
        {"send": {"type": "ping"}},
        {"case": "closes", "requires": ["CORE-PING"]},
        {"close": {}},
        {"case": "no-handshake", "requires": ["CORE-PING"], "handshake": False},
        {"send": {"type": "ping"}},
        {"case": "declared", "requires": ["CORE-PING"], "own_connection": True},
        {"send": {"type": "ping"}},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    assert {c.id: c.own_connection for c in load_file(path)} == {
        "plain": False, "closes": True, "no-handshake": True, "declared": True}


def test_a_case_cannot_deny_needing_its_own_connection(tmp_path: Path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"case": "x", "requires": ["CORE-PING"], "own_connection": False})
                    + "\n" + json.dumps({"reconnect": {}}) + "\n", encoding="utf-8")
    with pytest.raises(CaseError, match="own_connection false, but it has a 'reconnect' step"):
        load_file(path)


def test_kit_cases_needing_their_own_connection_are_the_ones_that_end_it(cases):
    own = {c.id for c in cases if c.own_connection}
    assert {"eof-finishes-chains-stdio", "shutdown-drains-chains", "close-cancels-chains-ws",
            "handshake-resp-shape"} <= own
    assert "ping-pong" not in own and len(own) < len(cases) // 4


def test_cli_k_can_be_given_several_times(capsys):
    from conformance.cli import main

    assert main(["--list", "-k", "cycle-self-loop", "-k", "PING"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert {"cycle-self-loop", "ping-pong", "ping-twice-uptime-rises"} <= set(listed)
    assert "cycle-two-nodes" not in listed


def test_cli_with_an_unusable_url_says_so_in_one_line(capsys):
    from conformance.cli import main

    assert main(["--ws", "ws://127.0.0.1:notaport", "-k", "ping-pong"]) == 2
    err = capsys.readouterr().err
    assert "cannot run against the host" in err and "Traceback" not in err


def _manifest(tmp_path: Path, *entries: dict) -> Path:
    path = tmp_path / "requirements.json"
    path.write_text(json.dumps({"requirements": list(entries)}), encoding="utf-8")
    return path


@pytest.mark.parametrize(("entry", "why"), [
    ({"level": "spec"}, "binding MUST or SHOULD"),
    ({"level": "spec", "binding": "MAY", "spec_lines": [61]}, "binding MUST or SHOULD"),
    ({"level": "spec", "binding": "MUST", "spec_lines": [999]}, "spec_lines must be lines"),
    ({"level": "protocol", "binding": "MUST"}, "only a spec requirement"),
    ({"level": "extension"}, "names the feature"),
    ({"level": "decision", "feature": "chain/cancel"}, "names the feature"),
    ({"level": "rumour"}, "level must be one of"),
])
def test_a_requirement_must_say_its_level_and_binding(tmp_path: Path, entry: dict,
                                                      why: str) -> None:
    path = _manifest(tmp_path, {"id": "A-B", "source": "s", "statement": "t", **entry})
    with pytest.raises(ValueError, match=why):
        load_requirements(path)


def test_a_spec_requirement_is_judged_only_by_cases_of_its_own_level(tmp_path: Path) -> None:
    path = _manifest(
        tmp_path,
        {"id": "SPEC-X", "level": "spec", "binding": "MUST", "spec_lines": [61],
         "source": "s", "statement": "t"},
        {"id": "PROTO-Y", "level": "protocol", "source": "s", "statement": "t"})
    requirements = load_requirements(path)
    by_id = {r.id: r for r in requirements}
    mixed = Case(id="m", requires=("SPEC-X", "PROTO-Y"), doc="", steps=(), source="t")
    assert case_level(mixed, by_id) == "protocol"
    assert coverage_problems(requirements, [mixed]) == [
        "requirement SPEC-X (spec) has no case of its own level: every case naming it also "
        "names a less binding requirement"]
    alone = Case(id="s", requires=("SPEC-X",), doc="", steps=(), source="t")
    assert case_level(alone, by_id) == "spec"
    assert coverage_problems(requirements, [mixed, alone]) == []
    assert by_id["SPEC-X"].cited == "docs/chains-spec.txt l.61 (MUST)"


def test_an_extension_case_is_gated_on_what_its_requirements_and_handshake_need() -> None:
    requirements = {r.id: r for r in load_requirements()}
    by_case = {c.id: c for c in load_cases()}
    assert gating_features(by_case["cancel-right-after-request"], requirements) == (
        "chain/cancel",)
    assert "handshake/limits" in gating_features(by_case["max-nodes-at-ceiling"], requirements)
    assert "limits:max_timeout" in gating_features(
        by_case["raised-timeout-still-refused"], requirements)
    assert gating_features(by_case["spec-tool-output"], requirements) == ()


def test_reports_score_each_level_apart_and_cite_the_spec_line() -> None:
    requirements = load_requirements()
    by_case = {c.id: c for c in load_cases()}
    results = [
        CaseResult(by_case["spec-event-seq"], "failed", ["SPEC-EVENT-SEQ: seq [0, 0]"],
                   level="spec"),
        CaseResult(by_case["spec-tool-output"], "passed", level="spec",
                   findings=[("CHAIN-EVT-SEQ", "seq should be 1..2, got [0, 0]")]),
        CaseResult(by_case["cancel-right-after-request"], "skipped",
                   ["host does not advertise chain/cancel"], offered=False, level="extension"),
    ]
    scores = level_scores(requirements, results)
    assert scores["spec MUST"] == {"passed": 1, "failed": 1, "not_offered": 0, "skipped": 0,
                                   "untested": 0}
    assert scores["protocol"]["failed"] == 1  # the finding, once
    assert scores["extension"]["not_offered"] == 2
    text = markdown_report(requirements, results, "t")
    assert "| spec MUST | 1/2 passed (50%) |" in text
    assert "`SPEC-EVENT-SEQ` | spec | docs/chains-spec.txt l.61 (MUST)" in text
    assert "defect in 1 case(s): seq should be 1..2" in text
    report = json_report(requirements, results, "stdio")
    assert report["defects"] == {"CHAIN-EVT-SEQ": {"cases": ["spec-tool-output"],
                                                   "first": "seq should be 1..2, got [0, 0]"}}
    assert report["runner_errors"] == []
    status = {r["id"]: r["status"] for r in report["requirements"]}
    assert (status["SPEC-TOOL"], status["CANCEL-CHAIN"]) == ("passed", "not_offered")
