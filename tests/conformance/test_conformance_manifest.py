"""The conformance kit is complete: every requirement has a case, every case a requirement.

Source: conformance/README.md (requirement-driven kit); STYLE.md "Tests and habits".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conformance.cases import CASES_DIR, STEP_KINDS, CaseError, load_cases, load_file
from conformance.manifest import (
    README,
    coverage_problems,
    load_requirements,
    readme_with_table,
    render_markdown,
)
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
