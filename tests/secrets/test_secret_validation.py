"""``$secret`` references at validation (PROTOCOL.md §5 Secrets): refused in expressions,
for unknown names, for tools and executables a secret does not allow, in node kinds that
would expose it; each problem names the node and field, never a value, with a hint."""

from __future__ import annotations

from typing import Any

import pytest

from a2e_host.chains.messages import ChainNode, ChainRequest
from a2e_host.chains.toolbox import Toolbox
from a2e_host.chains.validation import validate_chain
from a2e_host.config import load_config
from a2e_host.exceptions import ChainInvalid
from a2e_host.limits import Limits, SessionLimits
from tests.support.secret_values import HOST_VALUE, REQUEST_VALUE

CONFIG = """\
tools = ["secretprobe", "conformance"]
allow_proc = ["env"]
proc_env_keys = ["TOKEN"]

[secrets]
HOSTKEY = {env = "SP_HOSTKEY", tools = ["secret_*"], executables = ["env"]}
OTHERKEY = {env = "SP_OTHER", tools = ["echo"]}

[request_secrets]
tools = ["secret_echo"]
"""


@pytest.fixture(scope="module")
def toolbox(tmp_path_factory: pytest.TempPathFactory) -> Toolbox:
    directory = tmp_path_factory.mktemp("secrets")
    path = directory / "host.toml"
    path.write_text(CONFIG, encoding="utf-8")
    mp = pytest.MonkeyPatch()
    mp.setenv("SP_HOSTKEY", HOST_VALUE)
    mp.setenv("SP_OTHER", "other-value-123")
    try:
        config = load_config(path, overrides={"root": str(directory)}, environ={})
    finally:
        mp.undo()
    return Toolbox.from_config(config)


def _problems(toolbox: Toolbox, nodes: list[dict[str, Any]], **fields: Any) -> list[dict[str, Any]]:
    request = ChainRequest(nodes=[ChainNode(**n) for n in nodes], entry_node=nodes[0]["node_id"],
                           **fields)
    with pytest.raises(ChainInvalid) as refused:
        validate_chain(request, toolbox, SessionLimits(Limits()), granted=frozenset(
            {"chains", "proc", "skill"}))
    errors: list[dict[str, Any]] = refused.value.details["errors"]
    text = str(refused.value.details)
    assert HOST_VALUE not in text and REQUEST_VALUE not in text
    return errors


def _echo(node_id: str = "e", **node: Any) -> dict[str, Any]:
    return {"node_id": node_id, "kind": "tool", "name": "secret_echo",
            "input": {"a": {"$secret": "HOSTKEY"}, "b": "plain"}, **node}


def _where(problems: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(p["code"], p["node_id"], p["field"]) for p in problems]


def test_references_the_tool_may_receive_validate_and_fit_a_string_field(
    toolbox: Toolbox,
) -> None:
    request = ChainRequest(nodes=[ChainNode(**_echo(input={
        "a": {"$secret": "HOSTKEY"}, "b": {"$secret": "REQKEY"}}))], entry_node="e",
        secrets={"REQKEY": REQUEST_VALUE})
    plan = validate_chain(request, toolbox, SessionLimits(Limits()), granted=frozenset())
    assert plan.nodes[0].node.input["a"] == {"$secret": "HOSTKEY"}  # resolved only when called


def test_secret_inside_an_input_map_expression_is_refused_with_a_hint(toolbox: Toolbox) -> None:
    problems = _problems(toolbox, [_echo(input={"b": "x"}, input_map={
        "a": '`{"$secret": "HOSTKEY"}`'})])
    assert _where(problems)[0] == ("secret_in_expression", "e", "input_map.a")
    assert "static 'input'" in problems[0]["hint"]


def test_an_unknown_secret_is_refused_naming_the_node_field_and_the_closest_name(
    toolbox: Toolbox,
) -> None:
    problems = _problems(toolbox, [_echo(input={"a": {"$secret": "HOSTKYE"}, "b": "x"})])
    assert _where(problems) == [("secret_unknown", "e", "input.a")]
    assert problems[0]["secret"] == "HOSTKYE"
    assert problems[0]["hint"].startswith("did you mean 'HOSTKEY'?")


def test_a_secret_not_allowed_for_the_nodes_tool_or_its_fallback_is_refused(
    toolbox: Toolbox,
) -> None:
    problems = _problems(toolbox, [
        {"node_id": "o", "kind": "tool", "name": "secret_echo",
         "input": {"a": {"$secret": "OTHERKEY"}, "b": "x"}, "next_node": "f"},
        _echo("f", fallback="echo"),
    ])
    assert _where(problems) == [("secret_denied", "o", "input.a"),
                                ("secret_denied", "f", "input.a")]
    assert "tool 'secret_echo'" in problems[0]["message"]
    assert "tool 'echo'" in problems[1]["message"]
    assert "(echo)" in problems[0]["hint"]


def test_a_request_secret_reaches_only_the_tools_request_secrets_allow(
    toolbox: Toolbox,
) -> None:
    problems = _problems(toolbox, [
        {"node_id": "f", "kind": "tool", "name": "secret_fail",
         "input": {"a": "x", "b": {"$secret": "REQKEY"}}},
    ], secrets={"REQKEY": REQUEST_VALUE})
    assert _where(problems) == [("secret_denied", "f", "input.b")]


def test_a_request_secret_may_not_shadow_a_configured_one_nor_be_short(
    toolbox: Toolbox,
) -> None:
    problems = _problems(toolbox, [_echo()], secrets={"HOSTKEY": REQUEST_VALUE,
                                                      "SHORT": "1234"})
    assert _where(problems) == [("secret_denied", "", "secrets.HOSTKEY"),
                                ("secret_invalid", "", "secrets.SHORT")]


def test_more_request_secrets_than_the_ceiling_is_chain_limit(toolbox: Toolbox) -> None:
    many = {f"K{i}": f"value-{i:04d}" for i in range(17)}
    problems = _problems(toolbox, [_echo()], secrets=many)
    assert problems[0]["code"] == "chain_limit"
    assert (problems[0]["ceiling"], problems[0]["limit"], problems[0]["requested"]) == (
        "max_request_secrets", 16, 17)


def test_secrets_reach_no_skill_or_branch_and_no_command_line(toolbox: Toolbox) -> None:
    problems = _problems(toolbox, [
        {"node_id": "b", "kind": "branch", "condition": "`true`", "true_node": "p",
         "input": {"x": {"$secret": "HOSTKEY"}}},
        {"node_id": "p", "kind": "proc", "input": {"argv": ["env", {"$secret": "HOSTKEY"}]}},
    ])
    assert ("secret_kind", "b", "input.x") in _where(problems)


def test_a_proc_secret_goes_in_env_of_an_allowed_static_executable(toolbox: Toolbox) -> None:
    ok = ChainRequest(nodes=[ChainNode(node_id="p", kind="proc", input={
        "argv": ["env"], "env": {"TOKEN": {"$secret": "HOSTKEY"}}})], entry_node="p")
    validate_chain(ok, toolbox, SessionLimits(Limits()), granted=frozenset({"proc"}))
    problems = _problems(toolbox, [
        {"node_id": "p", "kind": "proc", "input": {"argv": ["env"], "env": {
            "TOKEN": {"$secret": "OTHERKEY"}}}, "next_node": "q"},
        {"node_id": "q", "kind": "proc", "input": {"env": {"TOKEN": {"$secret": "HOSTKEY"}}},
         "input_map": {"argv": "input.argv"}},
    ])
    assert _where(problems)[:2] == [("secret_denied", "p", "input.env.TOKEN"),
                                    ("secret_kind", "q", "input.env.TOKEN")]


def test_a_malformed_reference_is_refused(toolbox: Toolbox) -> None:
    problems = _problems(toolbox, [_echo(input={"a": {"$secret": "HOSTKEY", "x": 1},
                                                "b": "x"})])
    assert ("secret_invalid", "e", "input.a") in _where(problems)
