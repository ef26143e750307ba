"""Validation never crashes and stays near-linear on hostile chains (issue 12, items 2 and 3;
issue 13, item 7; PROTOCOL.md §4, §6)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from a2e_host.chains import hints, node_checks, validation
from a2e_host.chains.expressions import MAX_EXPRESSION_NESTING
from a2e_host.chains.problems import MAX_PROBLEMS
from a2e_host.exceptions import ChainInvalid
from a2e_host.limits import Limits
from tests.support.chains import problems, refusal, validate
from tests.support.expressions import NESTINGS

# ── nesting ────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("form", NESTINGS)
def test_a_deeply_nested_expression_is_chain_invalid_naming_node_field_and_bound(
    form: str,
) -> None:
    text = NESTINGS[form](600)
    err = refusal([{"node_id": "a", "input_map": {"v": text}}])
    assert (err.code, err.node_id) == ("chain_invalid", "a")
    [problem] = problems(err)
    assert (problem["node_id"], problem["field"]) == ("a", "input_map.v")
    assert f"at most {MAX_EXPRESSION_NESTING} are allowed" in problem["message"]
    assert "levels deep" in problem["message"]
    assert f"{MAX_EXPRESSION_NESTING} levels" in problem["hint"]
    assert len(problem["message"]) < 400, "the expression is clipped in the message"


@pytest.mark.parametrize(
    ("field", "node"),
    [
        ("condition", {"node_id": "a", "kind": "branch", "true_node": "b",
                       "condition": "(" * 600 + "input" + ")" * 600}),
        ("items_path", {"node_id": "a", "kind": "map", "map_node": "b",
                        "items_path": "`" + "[" * 5000 + "]" * 5000 + "`"}),
    ],
)
def test_deep_conditions_and_items_paths_are_refused_too(field: str, node: dict[str, Any]) -> None:
    err = refusal([node, {"node_id": "b"}])
    assert [(p["node_id"], p["field"], p["code"]) for p in problems(err)] == [
        ("a", field, "chain_invalid")]


def test_an_unexpected_recursion_error_still_ends_in_chain_invalid(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def explode(self: Any) -> None:
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(validation._Validator, "check_templates", explode)
    err = refusal([{"node_id": "a"}])
    assert err.code == "chain_invalid"
    assert "nests too deeply" in err.message
    assert problems(err)[0]["field"] == "nodes"


# ── scale ──────────────────────────────────────────────────────────────────────


def missing_targets(count: int) -> list[dict[str, Any]]:
    """``count`` nodes whose ``next_node`` and data read name missing ``nodf…`` ids."""
    return [
        {"node_id": f"node{i:05d}", "next_node": f"nodf{i:05d}",
         "input_map": {"x": f"nodg{i:05d}.output"}}
        for i in range(count)
    ]


def linked(count: int) -> list[dict[str, Any]]:
    """``count`` nodes in a line, each reading the one before: nothing to report."""
    return [
        {"node_id": f"node{i:05d}", "next_node": f"node{i + 1:05d}" if i + 1 < count else "",
         "input_map": {"x": f"node{i - 1:05d}.output" if i else "input"}}
        for i in range(count)
    ]


@pytest.mark.parametrize("count", [1_000, 10_000])
def test_thousands_of_missing_ids_validate_in_near_linear_time(count: int) -> None:
    started = time.perf_counter()
    validate(linked(count), "node00000")
    baseline = time.perf_counter() - started  # the same size with no problem, on this machine now
    started = time.perf_counter()
    err = refusal(missing_targets(count), "node00000")
    took = time.perf_counter() - started
    # about the baseline when linear; the quadratic suggestions took 17 s for 1,000 nodes
    # (hundreds of baselines)
    assert took < 2.0 + 25 * baseline, (
        f"{count} nodes took {took:.2f} s to validate; {baseline:.2f} s without problems"
    )
    found = problems(err)
    # every problem is still counted; the first MAX_PROBLEMS, in the order found, listed
    assert (err.details["problems_total"], err.details["problems_listed"], len(found)) == (
        2 * count, MAX_PROBLEMS, MAX_PROBLEMS)
    assert f"({2 * count} problems, the first {MAX_PROBLEMS} listed" in err.message
    fields = [(p["node_id"], p["field"]) for p in found]
    assert fields == [(f"node{i:05d}", "next_node") for i in range(MAX_PROBLEMS)]
    first = next(p for p in found if p["field"] == "next_node")
    assert first["message"].endswith("did you mean 'node00000'?"), first["message"]


def test_suggestions_among_many_ids_find_a_one_edit_typo() -> None:
    nodes = [{"node_id": f"step_{i}_{'abcdefgh'[i % 8]}"} for i in range(1_000)]
    nodes[0]["next_node"] = "stpe_500_e"  # a swap
    nodes[1]["next_node"] = "step_500e"  # a deletion
    nodes[2]["next_node"] = "zzzzzzzzzzzz"  # nothing close
    err = refusal(nodes, "step_3_d")
    messages = [p["message"] for p in problems(err) if p["field"] == "next_node"]
    assert messages[0].endswith("did you mean 'step_500_e'?"), messages[0]
    assert messages[1].endswith("did you mean 'step_500_e'?"), messages[1]
    assert "did you mean" not in messages[2]


def test_suggestions_stop_after_a_bound_but_every_problem_is_reported() -> None:
    nodes = [{"node_id": f"n{i}", "next_node": f"m{i}"} for i in range(300)]
    err = refusal(nodes, "n0")
    found = problems(err)
    suggested = [p for p in found if "did you mean" in p["message"]]
    assert (err.details["problems_total"], len(found)) == (300, MAX_PROBLEMS)
    assert 0 < len(suggested) <= hints.MAX_SUGGESTIONS


# ── chain_limit details at the top (issue 13, item 7) ──────────────────────────


def test_a_limit_refusal_puts_its_ceiling_at_the_top_of_details() -> None:
    nodes = [{"node_id": f"n{i}"} for i in range(3)]
    err = refusal(nodes, "n0", limits=Limits(max_nodes=2), asked={"max_nodes": 1})
    assert err.code == "chain_limit"
    top = {k: err.details[k] for k in ("ceiling", "scope", "limit", "requested")}
    assert top == {"ceiling": "max_nodes", "scope": "session", "limit": 1, "requested": 3}
    assert [p["ceiling"] for p in err.details["errors"] if p["code"] == "chain_limit"] == [
        "max_nodes"]


def test_a_limit_behind_a_cycle_stays_inside_errors_only() -> None:
    nodes = [{"node_id": "a", "next_node": "b"}, {"node_id": "b", "next_node": "a"},
             {"node_id": "c"}]
    err = refusal(nodes, "c", limits=Limits(max_nodes=2))
    assert err.code == "chain_cycle"
    assert "ceiling" not in err.details
    assert any(p.get("ceiling") == "max_nodes" for p in err.details["errors"])


def test_an_invalid_chain_has_only_errors_in_details() -> None:
    err = refusal([{"node_id": "a", "next_node": "zz"}])
    assert err.code == "chain_invalid" and list(err.details) == ["errors"]


def test_a_valid_chain_is_unaffected() -> None:
    assert validate([{"node_id": "a", "input_map": {"v": "(((input)))"}}]).entry == 0


def test_every_problem_reported_has_the_wire_keys() -> None:
    err = refusal([{"node_id": "a", "input_map": {"v": "!" * 100 + "x"}}])
    assert isinstance(err, ChainInvalid)
    assert set(problems(err)[0]) >= {"code", "node_id", "field", "message", "hint"}


def test_expression_text_past_its_ceiling_is_refused_before_any_of_it_is_compiled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One node may declare 120 expressions of 65,000 characters: 7.9 MB of text took
    22 s and 637 MB to parse. The chain's total is a ceiling, checked before parsing."""
    compiled: list[str] = []
    real = node_checks.compile_expression
    monkeypatch.setattr(node_checks, "compile_expression",
                        lambda text: compiled.append(text) or real(text))
    keys = {f"k{j}": "[" + ", ".join(["input.a"] * 200) + "]" for j in range(10)}
    chars = sum(len(text) for text in keys.values())
    err = refusal([{"node_id": "a", "input_map": keys}],
                  asked={"max_chain_expression_chars": 5000})
    assert err.code == "chain_limit"
    assert {k: err.details[k] for k in ("ceiling", "scope", "limit", "requested")} == {
        "ceiling": "max_chain_expression_chars", "scope": "session", "limit": 5000,
        "requested": chars,
    }
    assert compiled == []
    assert validate([{"node_id": "a", "input_map": keys}]).nodes[0].node_id == "a"
