"""Skills: declarative skill files load, validate at load time, and run as sub-chains."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from a2e_host.chains.messages import ChainNode
from a2e_host.chains.nodes import NodeContext
from a2e_host.chains.skills import DeclaredSkill, SkillLoadError, load_skills
from a2e_host.chains.toolbox import Toolbox
from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.tools import tool

SHOUT_YAML = """\
name: shout_words
description: Upper-case the parts, joined.
input_schema: {type: object, required: [parts]}
entry_node: join
nodes:
  - {node_id: join, kind: tool, name: concat, input_map: {parts: input.parts}, next_node: up}
  - {node_id: up, kind: tool, name: upper, input_map: {text: join.output.text}}
"""


def config_for(skills_dir: Path) -> HostConfig:
    return HostConfig(tools=("conformance",), skills_dirs=(str(skills_dir),))


def test_declarative_yaml_skill_calling_two_tools_loads(tmp_path: Path) -> None:
    (tmp_path / "shout.yaml").write_text(SHOUT_YAML, encoding="utf-8")
    box = Toolbox.from_config(config_for(tmp_path))
    assert box.skill_names() == ["shout_words"]
    skill = box.skills.get("shout_words")
    assert isinstance(skill, DeclaredSkill)
    assert [(n.node_id, n.kind, n.name) for n in skill.nodes] == [
        ("join", "tool", "concat"),
        ("up", "tool", "upper"),
    ]
    assert skill.entry_node == "join"
    assert skill.required == ("parts",)
    assert skill.source == tmp_path / "shout.yaml"


def test_json_skill_file_loads(tmp_path: Path) -> None:
    spec = {
        "name": "sum_two",
        "entry_node": "s",
        "nodes": [
            {
                "node_id": "s",
                "kind": "tool",
                "name": "add",
                "input_map": {"a": "input.a"},
                "input": {"b": 1},
            }
        ],
    }
    (tmp_path / "sum.json").write_text(json.dumps(spec), encoding="utf-8")
    assert Toolbox.from_config(config_for(tmp_path)).skill_names() == ["sum_two"]


def test_skill_with_an_unknown_tool_is_refused_naming_file_and_problem(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(SHOUT_YAML.replace("name: upper", "name: uper"), "utf-8")
    with pytest.raises(SkillLoadError) as info:
        Toolbox.from_config(config_for(tmp_path))
    text = str(info.value)
    assert str(tmp_path / "bad.yaml") in text
    assert "unknown tool 'uper'" in text and "'upper'" in text


def test_broken_skill_file_is_refused_with_the_field_path(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text(
        "name: x\nentry_node: a\nnodes:\n  - {node_id: a, kind: 3}\n", encoding="utf-8"
    )
    (tmp_path / "garbage.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(SkillLoadError) as info:
        load_skills(config_for(tmp_path), python_skills=[])
    paths = [p for p, _ in info.value.problems]
    assert paths == [str(tmp_path / "broken.yaml"), str(tmp_path / "garbage.json")]
    assert "Expected `str`, got `int` - at `$.nodes[0].kind`" in info.value.problems[0][1]
    assert "not valid JSON" in info.value.problems[1][1]


def test_entry_node_must_exist(tmp_path: Path) -> None:
    (tmp_path / "s.yaml").write_text(
        SHOUT_YAML.replace("entry_node: join", "entry_node: nope"), encoding="utf-8"
    )
    with pytest.raises(SkillLoadError, match="entry_node"):
        Toolbox.from_config(config_for(tmp_path))


def test_duplicate_skill_names_are_refused(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(SHOUT_YAML, encoding="utf-8")
    (tmp_path / "b.yaml").write_text(SHOUT_YAML, encoding="utf-8")
    with pytest.raises(SkillLoadError, match="skill 'shout_words@1' is defined twice"):
        Toolbox.from_config(config_for(tmp_path))


def test_missing_skills_dir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SkillLoadError, match="is not a directory of skill files"):
        load_skills(config_for(tmp_path / "nope"), python_skills=[])


def ctx_with(runner: Any) -> NodeContext:
    return NodeContext(node_id="s", chain_id="c", req_id="r", run_subchain=runner)


def test_declarative_skill_runs_through_run_subchain(tmp_path: Path) -> None:
    (tmp_path / "shout.yaml").write_text(SHOUT_YAML, encoding="utf-8")
    box = Toolbox.from_config(config_for(tmp_path))
    calls: list[tuple[str, list[str], str, dict[str, Any]]] = []

    async def runner(name: str, nodes: list[ChainNode], entry: str, inp: dict[str, Any]) -> Any:
        calls.append((name, [n.node_id for n in nodes], entry, inp))
        return {"text": "A"}

    node = ChainNode(node_id="s", kind="skill", name="shout_words")
    out = anyio.run(box.executors["skill"], node, {"parts": ["a"]}, ctx_with(runner))
    assert out == {"text": "A"}
    assert calls == [("shout_words", ["join", "up"], "join", {"parts": ["a"]})]


def test_declarative_skill_checks_required_input(tmp_path: Path) -> None:
    (tmp_path / "shout.yaml").write_text(SHOUT_YAML, encoding="utf-8")
    box = Toolbox.from_config(config_for(tmp_path))
    node = ChainNode(node_id="s", kind="skill", name="shout_words")
    with pytest.raises(NodeError, match="skill 'shout_words': input field 'parts' is required"):
        anyio.run(box.executors["skill"], node, {}, ctx_with(None))


def test_python_skill_is_invoked_like_a_tool(tmp_path: Path) -> None:
    @tool(blocking=False)
    def double(n: int) -> int:
        return n * 2

    registry = load_skills(HostConfig(), python_skills=[double])
    node = ChainNode(node_id="s", kind="skill", name="double")
    assert anyio.run(registry.run_skill, node, {"n": 21}, ctx_with(None)) == 42
