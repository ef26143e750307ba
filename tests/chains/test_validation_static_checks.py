"""What the static checks refuse, what they only warn about, and what they leave to run
time (PROTOCOL.md §4 static checks; DECISIONS.md "Static checks")."""

from __future__ import annotations

import decimal
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from a2e_host.chains.catalog import Signature
from a2e_host.chains.messages import ChainNode, ChainRequest
from a2e_host.chains.skills import DeclaredSkill, SkillLoadError, SkillRegistry, load_skills
from a2e_host.chains.toolbox import Toolbox
from a2e_host.chains.typecheck import MAX_WARNINGS
from a2e_host.chains.validation import ChainPlan, validate_chain
from a2e_host.config import HostConfig
from a2e_host.exceptions import ChainInvalid
from a2e_host.limits import Limits, SessionLimits
from a2e_host.tools import Tool, ToolRegistry, load_tools, tool
from tests.support.chains import FakeCatalog


class Strict(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    count: int = 1


class Tagged(msgspec.Struct, tag="point"):
    x: int


class Priced(msgspec.Struct):
    price: decimal.Decimal
    where: Tagged


class Point(msgspec.Struct):
    x: int
    y: int


def strict_tool(value: Strict) -> dict[str, Any]:
    return {"name": value.name}


@tool
def make_point(x: int, y: int) -> Point:
    """A point."""
    return Point(x, y)


@tool
def span(a: Point, b: Point) -> int:
    """The Manhattan distance between two points."""
    return abs(a.x - b.x) + abs(a.y - b.y)


def described(args: dict[str, Any]) -> Any:
    return args


def extra_tools() -> list[Tool]:
    loose = Tool("loose", described)  # any object in, schema only described
    loose.input_schema = {"type": "object", "properties": {"ms": {"type": "number"}},
                          "required": ["ms"]}
    return [Tool("strict", strict_tool, input_type=Strict), make_point, span, loose,
            Tool("priced", described, input_type=Priced)]


@pytest.fixture(scope="module")
def toolbox(tmp_path_factory: pytest.TempPathFactory) -> Toolbox:
    registry = load_tools(HostConfig(tools=["conformance", "fs", "text"],
                                     root=str(tmp_path_factory.mktemp("root"))))
    for extra in extra_tools():
        registry.register(extra)
    skills = SkillRegistry()
    skills.register_declared(DeclaredSkill(
        name="summarize", description="", entry_node="c",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}},
                      "required": ["text"]},
        nodes=[ChainNode(node_id="c", kind="tool", name="word_count",
                         input_map={"text": "input.text"})]))
    return Toolbox(ToolRegistry(list(registry)), skills)


def check(toolbox: Any, *nodes: dict[str, Any]) -> ChainPlan:
    request = ChainRequest(nodes=[ChainNode(**{"kind": "tool", **n}) for n in nodes],
                           entry_node=nodes[0]["node_id"])
    return validate_chain(request, toolbox, SessionLimits(Limits()),
                          granted=frozenset({"chains", "skill"}))


def refused(toolbox: Any, *nodes: dict[str, Any]) -> ChainInvalid:
    with pytest.raises(ChainInvalid) as info:
        check(toolbox, *nodes)
    return info.value


def where(problems: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> list[tuple[str, ...]]:
    return [(p["code"], p["node_id"], p["field"]) for p in problems]


# ── errors: sure to fail ──


def test_an_unknown_field_of_a_closed_input_is_an_error(toolbox: Toolbox) -> None:
    err = refused(toolbox, {"node_id": "s", "name": "strict",
                            "input": {"name": "x", "cuont": 2}})
    assert where(err.details["errors"]) == [("chain_invalid", "s", "input.cuont")]
    assert (err.details["errors"][0]["message"], err.details["errors"][0]["hint"]) == (
        "tool 'strict' refuses unknown input fields and has no field 'cuont'; did you mean "
        "'count'?", "rename it to 'count'")


def test_a_struct_output_read_field_by_field_is_typed(toolbox: Toolbox) -> None:
    err = refused(toolbox,
                  {"node_id": "p", "name": "make_point", "input": {"x": 1, "y": 2},
                   "next_node": "u"},
                  {"node_id": "u", "name": "upper", "input_map": {"text": "p.output.x"}})
    assert [(p["field"], p["expected"], p["inferred"]) for p in err.details["errors"]] == [
        ("input_map.text", "string", "integer")]


def test_an_object_built_from_outputs_is_checked_field_by_field(toolbox: Toolbox) -> None:
    point = {"node_id": "p", "name": "make_point", "input": {"x": 1, "y": 2},
             "next_node": "s"}
    plan = check(toolbox, point, {"node_id": "s", "name": "span", "input": {"b": {"x": 0, "y": 0}},
                                  "input_map": {"a": "{x: p.output.x, y: p.output.y}"}})
    assert plan.warnings == ()
    err = refused(toolbox, point, {"node_id": "s", "name": "span",
                                   "input": {"b": {"x": 0, "y": 0}},
                                   "input_map": {"a": "{x: p.output.x}"}})
    assert [(p["field"], p["message"]) for p in err.details["errors"]] == [(
        "input_map.a", "input field 'a' of tool 'span' needs 'a.y' (an integer), but "
        "'{x: p.output.x}' gives an object without it")]


def test_a_declared_skill_refuses_an_input_without_its_required_field(
    toolbox: Toolbox,
) -> None:
    err = refused(toolbox, {"node_id": "s", "kind": "skill", "name": "summarize",
                            "input": {"body": "hello"}})
    assert where(err.details["errors"]) == [("chain_invalid", "s", "input.text")]
    assert err.details["errors"][0]["message"] == (
        "skill 'summarize' requires input field 'text', which neither input nor input_map "
        "gives")
    assert where(err.details["warnings"]) == [("chain_warning", "s", "input.body")]


# ── warnings: could fail; the chain is not refused ──


def test_a_number_into_an_integer_is_a_warning_kept_on_the_plan(toolbox: Toolbox) -> None:
    plan = check(toolbox,
                 {"node_id": "a", "name": "add", "input": {"a": 1, "b": 2}, "next_node": "b"},
                 {"node_id": "b", "name": "big", "input_map": {"bytes": "a.output.sum"}})
    assert [(w["code"], w["node_id"], w["field"], w["expected"], w["inferred"])
            for w in plan.warnings] == [
        ("chain_warning", "b", "input_map.bytes", "integer", "number")]
    assert plan.warnings[0]["message"] == (
        "input field 'bytes' of tool 'big' takes an integer, but 'a.output.sum' may be a "
        "number")


def test_a_refusal_lists_its_warnings_next_to_its_errors(toolbox: Toolbox) -> None:
    err = refused(toolbox,
                  {"node_id": "a", "name": "add", "input": {"a": 1, "b": 2}, "next_node": "b"},
                  {"node_id": "b", "name": "big", "input_map": {"bytes": "a.output.sum"},
                   "next_node": "c"},
                  {"node_id": "c", "name": "add", "input": {"a": 1}})
    assert where(err.details["errors"]) == [("chain_invalid", "c", "input.b")]
    assert where(err.details["warnings"]) == [("chain_warning", "b", "input_map.bytes")]


def test_a_refusal_without_warnings_has_no_warnings_key(toolbox: Toolbox) -> None:
    err = refused(toolbox, {"node_id": "c", "name": "add", "input": {"a": 1}})
    assert set(err.details) == {"errors"}


def test_a_schema_the_host_does_not_enforce_gives_warnings_only(toolbox: Toolbox) -> None:
    plan = check(toolbox, {"node_id": "l", "name": "loose", "input": {"mss": "5"}})
    assert [(w["field"], w["message"]) for w in plan.warnings] == [
        ("input.mss", "tool 'loose' has no input field 'mss'; did you mean 'ms'? ('ms' is "
                      "required and nothing gives it)")]


def test_a_declared_skill_only_warns_about_types(toolbox: Toolbox) -> None:
    plan = check(toolbox, {"node_id": "s", "kind": "skill", "name": "summarize",
                           "input": {"text": 5, "extra": True}})
    assert where(plan.warnings) == [("chain_warning", "s", "input.extra"),
                                    ("chain_warning", "s", "input.text")]


def test_an_unknown_field_of_an_open_input_is_a_warning(toolbox: Toolbox) -> None:
    plan = check(toolbox, {"node_id": "u", "name": "upper", "input": {"text": "a", "tex": 1}})
    assert [w["message"] for w in plan.warnings] == [
        "tool 'upper' declares no input field 'tex', so it is ignored; did you mean 'text'?"]


def test_a_read_that_is_always_null_is_a_warning_where_any_value_is_taken(
    toolbox: Toolbox,
) -> None:
    plan = check(toolbox,
                 {"node_id": "r", "name": "read_file", "input": {"path": "a"}, "next_node": "e"},
                 {"node_id": "e", "name": "echo", "input_map": {"t": "r.output.txt"}})
    assert [(w["field"], w["inferred"]) for w in plan.warnings] == [("input_map.t", "null")]
    assert "did you mean 'text'?" in plan.warnings[0]["message"]


def test_warnings_are_capped_and_errors_are_not(toolbox: Toolbox) -> None:
    nodes = [{"node_id": f"u{i}", "name": "upper", "input": {"text": "a", "tex": 1}}
             for i in range(MAX_WARNINGS + 20)]
    nodes += [{"node_id": f"a{i}", "name": "add", "input": {"a": 1}} for i in range(150)]
    err = refused(toolbox, *nodes)
    assert len(err.details["errors"]) == 150
    assert len(err.details["warnings"]) == MAX_WARNINGS


# ── left to run time ──


def test_what_msgspec_accepts_beyond_the_schema_is_not_refused(toolbox: Toolbox) -> None:
    # a Decimal's schema is a string, but numbers convert too; a tag field may be left out
    plan = check(toolbox, {"node_id": "p", "name": "priced",
                           "input": {"price": 1.5, "where": {"x": 1}}})
    assert plan.warnings == ()
    plan = check(toolbox, {"node_id": "p", "name": "priced",
                           "input_map": {"price": "`2`", "where": "{x: `1`}"}})
    assert [(w["field"], w["message"]) for w in plan.warnings] == [(
        "input_map.where", "input field 'where' of tool 'priced' needs 'where.type' "
        "(a string 'point'), but '{x: `1`}' may give an object without it")]


def test_what_is_read_from_input_is_left_to_run_time(toolbox: Toolbox) -> None:
    plan = check(toolbox,
                 {"node_id": "b", "name": "big", "input_map": {"bytes": "input.n"},
                  "next_node": "u"},
                 {"node_id": "u", "name": "upper",
                  "input_map": {"text": "input.words[*].w | [0]"}})
    assert plan.warnings == ()


def test_a_tool_without_an_output_schema_gives_values_of_any_type(toolbox: Toolbox) -> None:
    plan = check(toolbox,
                 {"node_id": "e", "name": "echo", "input": {"n": 1}, "next_node": "b"},
                 {"node_id": "b", "name": "big", "input_map": {"bytes": "e.output.n"}})
    assert plan.warnings == ()


def test_a_catalog_without_signatures_checks_nothing() -> None:
    plan = check(FakeCatalog(tools=("add",)), {"node_id": "a", "name": "add"})
    assert plan.warnings == ()


def test_the_catalog_signature_says_what_the_host_enforces(toolbox: Toolbox) -> None:
    assert toolbox.signature_of("tool", "add") == Signature(
        toolbox.tools.get("add").input_schema,  # type: ignore[union-attr]
        toolbox.tools.get("add").output_schema)  # type: ignore[union-attr]
    loose = toolbox.signature_of("tool", "loose")
    assert loose is not None and (loose.input_enforced, loose.output_enforced) == (False, False)
    skill = toolbox.signature_of("skill", "summarize")
    assert skill is not None and (skill.input_enforced, skill.required_enforced) == (False, True)
    assert toolbox.signature_of("tool", "nope") is None
    assert toolbox.signature_of("proc", "x") is None


# ── skill files ──


def test_a_skill_file_sure_to_fail_stops_loading_naming_the_node(tmp_path: Path) -> None:
    (tmp_path / "shout.json").write_text(json.dumps({
        "name": "shout", "entry_node": "c",
        "nodes": [{"node_id": "c", "kind": "tool", "name": "count", "input": {"items": [1]},
                   "next_node": "u"},
                  {"node_id": "u", "kind": "tool", "name": "upper",
                   "input_map": {"text": "c.output.count"}}],
    }))
    config = HostConfig(tools=["conformance"], skills_dirs=[str(tmp_path)])
    with pytest.raises(SkillLoadError) as info:
        load_skills(config, Toolbox(load_tools(config)), python_skills=[])
    assert "node 'u' field 'input_map.text'" in str(info.value)
    assert "must be a string, but 'c.output.count' is an integer" in str(info.value)
