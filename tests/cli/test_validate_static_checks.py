"""``a2e-host validate`` refuses chains sure to fail at run time and prints what could fail
as warnings (PROTOCOL.md §4 static checks), as ``run`` and every ``chain/req`` see them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from a2e_host.commands import validate as command

pytestmark = pytest.mark.usefixtures("no_config_from_environment")

PACKS = ("conformance", "fs", "text", "json")


def validate(tmp_path: Path, nodes: list[dict[str, Any]], *, json_out: bool = False) -> int:
    path = tmp_path / "chain.json"
    path.write_text(json.dumps({"nodes": nodes, "entry_node": nodes[0]["node_id"]}),
                    encoding="utf-8")
    return command.validate_main(path, json_out=json_out, config_path=None,
                                 overrides={"tools": PACKS, "root": str(tmp_path)})


def tool(node_id: str, name: str, **fields: Any) -> dict[str, Any]:
    return {"node_id": node_id, "kind": "tool", "name": name, **fields}


def test_the_issue_chains_are_invalid_naming_node_and_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert validate(tmp_path, [tool("sum", "add", input={"a": "one"})]) == 1
    assert validate(tmp_path, [tool("r", "read_file", input={"pth": "notes.txt"})]) == 1
    assert validate(tmp_path, [
        tool("r", "read_file", input={"path": "notes.txt"}, next_node="b"),
        tool("b", "big", input_map={"bytes": "r.output.text"}),
    ]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "node 'sum' field 'input.b': tool 'add' requires input field 'b', which neither input "
        "nor input_map gives (fix: add 'b' to input (a number) or to input_map (an expression "
        "giving one))",
        "node 'sum' field 'input.a': input field 'a' of tool 'add' must be a number, but input "
        "gives string 'one' (fix: change input.a to a number)",
        "invalid (chain_invalid): 2 problems",
        "node 'r' field 'input.pth': tool 'read_file' has no input field 'pth'; did you mean "
        "'path'? ('path' is required and nothing gives it) (fix: rename 'pth' to 'path')",
        "invalid (chain_invalid): 1 problem",
        "node 'b' field 'input_map.bytes': input field 'bytes' of tool 'big' must be an "
        "integer, but 'r.output.text' is a string (fix: read a field that holds a number, or "
        "convert it with to_number(...))",
        "invalid (chain_invalid): 1 problem",
    ]


WARNED = [tool("a", "add", input={"a": 1, "b": 2}, next_node="b"),
          tool("b", "big", input_map={"bytes": "a.output.sum"})]


def test_a_chain_that_could_fail_is_valid_with_its_warnings_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert validate(tmp_path, WARNED) == 0
    assert capsys.readouterr().out.splitlines() == [
        "warning: node 'b' field 'input_map.bytes': input field 'bytes' of tool 'big' takes an "
        "integer, but 'a.output.sum' may be a number (fix: read a field that holds a number, "
        "or convert it with to_number(...))",
        "valid: chain.json: 2 nodes, roots a; terminals b, 1 warning",
    ]


def test_json_output_lists_warnings_valid_or_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert validate(tmp_path, WARNED, json_out=True) == 0
    valid = json.loads(capsys.readouterr().out)
    assert (valid["valid"], valid["errors"]) == (True, [])
    assert [(w["code"], w["node_id"], w["field"], w["expected"], w["inferred"])
            for w in valid["warnings"]] == [
        ("chain_warning", "b", "input_map.bytes", "integer", "number")]
    assert validate(tmp_path, [*WARNED, tool("c", "add", input={"a": 1})], json_out=True) == 1
    invalid = json.loads(capsys.readouterr().out)
    assert [(p["node_id"], p["field"]) for p in invalid["errors"]] == [("c", "input.b")]
    assert [(w["node_id"], w["field"]) for w in invalid["warnings"]] == [
        ("b", "input_map.bytes")]
