"""``a2e-host validate CHAIN.json [--json]``: diagnostics and exit codes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from a2e_host.chains.problems import MAX_PROBLEMS
from a2e_host.commands import validate as command
from tests.support.chains import FakeCatalog

pytestmark = pytest.mark.usefixtures("no_config_from_environment")


@pytest.fixture
def fake_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    granted = frozenset({"chains", "tools", "skill", "proc"})
    catalog = FakeCatalog(tools=("echo", "read_file"), skills=())
    monkeypatch.setattr(command, "_catalog", lambda config: (catalog, granted))


VALID = {
    "nodes": [
        {"node_id": "read", "kind": "tool", "name": "read_file", "next_node": "show"},
        {"node_id": "show", "kind": "tool", "name": "echo", "input_map": {"t": "read.output"}},
    ],
    "entry_node": "read",
}
INVALID = {
    "nodes": [
        {"node_id": "a", "kind": "tool", "name": "ech", "next_node": "b"},
        {"node_id": "b", "kind": "branch", "condition": "input.count > 0", "true_node": "a"},
    ],
    "entry_node": "a",
}


def write(tmp_path: Path, body: Any) -> Path:
    path = tmp_path / "chain.json"
    path.write_text(body if isinstance(body, str) else json.dumps(body), encoding="utf-8")
    return path


def run(path: Path, json_out: bool = False) -> int:
    return command.validate_main(path, json_out=json_out, config_path=None, overrides={})


@pytest.mark.usefixtures("fake_catalog")
def test_valid_chain_exits_zero_and_names_roots_and_terminals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(write(tmp_path, VALID)) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "roots read" in out and "terminals show" in out


@pytest.mark.usefixtures("fake_catalog")
def test_valid_chain_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(write(tmp_path, VALID), json_out=True) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is True
    assert (report["roots"], report["terminals"], report["errors"]) == (["read"], ["show"], [])


@pytest.mark.usefixtures("fake_catalog")
def test_invalid_chain_prints_one_line_per_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(write(tmp_path, INVALID)) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("node 'a' field 'next_node': the chain has a cycle a → b → a")
               for line in lines)
    assert any(line.startswith("node 'a' field 'name': unknown tool 'ech'; did you mean 'echo'?")
               and "(fix: " in line for line in lines)
    assert any(line.startswith("node 'b' field 'condition':") and "column 15" in line
               for line in lines)
    assert lines[-1] == f"invalid (chain_cycle): {len(lines) - 1} problems"


@pytest.mark.usefixtures("fake_catalog")
def test_invalid_chain_as_json_lists_every_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(write(tmp_path, INVALID), json_out=True) == 1
    report = json.loads(capsys.readouterr().out)
    assert (report["valid"], report["code"]) == (False, "chain_cycle")
    fields = {(p["node_id"], p["field"]) for p in report["errors"]}
    assert {("a", "next_node"), ("a", "name"), ("b", "condition")} <= fields


@pytest.mark.usefixtures("fake_catalog")
def test_a_chain_with_more_problems_than_are_listed_says_how_many_there_are(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [{"node_id": f"n{i}", "kind": "tool", "name": "ech"} for i in range(150)]
    assert run(write(tmp_path, {"nodes": nodes, "entry_node": "n0"})) == 1
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == MAX_PROBLEMS + 1
    assert lines[-1] == f"invalid (chain_invalid): 150 problems (the first {MAX_PROBLEMS} listed)"


@pytest.mark.usefixtures("fake_catalog")
def test_full_chain_request_with_envelope_is_accepted(tmp_path: Path) -> None:
    body = {"type": "chain/req", "id": "c1", "version": "1.0", "ts": 1.0, "session_id": "s",
            **VALID}
    assert run(write(tmp_path, body)) == 0


@pytest.mark.usefixtures("fake_catalog")
def test_wrongly_typed_field_is_invalid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(write(tmp_path, {"nodes": 3, "entry_node": "a"}), json_out=True) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["code"] == "schema_violation"
    assert report["errors"][0]["field"] == "$.nodes"


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"type": "ping"}'])
def test_bad_json_or_not_a_chain_exits_two(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    assert run(write(tmp_path, text)) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_missing_file_exits_two(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path / "absent.json", json_out=True) == 2
    report = json.loads(capsys.readouterr().out)
    assert (report["valid"], report["code"]) == (False, "unreadable")


def test_unknown_tool_pack_exits_two(tmp_path: Path) -> None:
    code = command.validate_main(write(tmp_path, VALID), json_out=False, config_path=None,
                                 overrides={"tools": ("no_such_pack_here",)})
    assert code == 2


def test_configured_tool_pack_is_the_catalog(tmp_path: Path) -> None:
    body = {"nodes": [{"node_id": "a", "kind": "tool", "name": "echo"}], "entry_node": "a"}
    path = write(tmp_path, body)
    with_pack = command.validate_main(path, json_out=False, config_path=None,
                                      overrides={"tools": ("conformance",)})
    without = command.validate_main(path, json_out=False, config_path=None, overrides={})
    assert (with_pack, without) == (0, 1)
