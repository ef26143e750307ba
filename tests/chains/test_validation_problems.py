"""Validation refuses bad chains, reporting every problem at once (PROTOCOL.md §4, §6, §8)."""

from __future__ import annotations

from typing import Any

import pytest

from a2e_host.chains.problems import MAX_PROBLEMS
from a2e_host.exceptions import ChainInvalid
from a2e_host.limits import Limits
from tests.support.chains import FakeCatalog, problems, refusal, validate


def where(err: ChainInvalid) -> set[tuple[str, str, str]]:
    return {(p["code"], p["node_id"], p["field"]) for p in problems(err)}


# ── unknown references ──────────────────────────────────────────────────────


def test_false_node_to_a_missing_node_is_rejected_though_never_taken() -> None:
    err = refusal([{"node_id": "a", "kind": "branch", "condition": "`true`",
                    "true_node": "b", "false_node": "nope"}, {"node_id": "b"}])
    assert err.code == "chain_invalid"
    assert where(err) == {("chain_invalid", "a", "false_node")}
    assert "'nope'" in problems(err)[0]["message"]


@pytest.mark.parametrize(
    ("node", "field"),
    [
        ({"node_id": "a", "next_node": "nope"}, "next_node"),
        ({"node_id": "a", "on_error": "nope"}, "on_error"),
        ({"node_id": "a", "kind": "map", "items_path": "input.xs", "map_node": "nope"},
         "map_node"),
        ({"node_id": "a", "kind": "branch", "condition": "input.ok", "true_node": "nope"},
         "true_node"),
    ],
)
def test_unknown_reference_in_any_edge_field_is_rejected(node: dict[str, Any], field: str) -> None:
    err = refusal([node])
    assert where(err) == {("chain_invalid", "a", field)}


def test_unknown_reference_suggests_a_close_node_id() -> None:
    err = refusal([{"node_id": "a", "next_node": "sumarize"}, {"node_id": "summarize"}])
    assert "did you mean 'summarize'?" in problems(err)[0]["message"]


def test_expression_reading_an_unknown_root_is_rejected() -> None:
    err = refusal([{"node_id": "a"}, {"node_id": "b", "input_map": {"x": "aa.output"}}])
    assert where(err) == {("chain_invalid", "b", "input_map.x")}
    assert "did you mean 'a'?" in problems(err)[0]["message"]


# ── cycles ──────────────────────────────────────────────────────────────────


def test_self_loop_is_a_cycle() -> None:
    err = refusal([{"node_id": "a", "next_node": "a"}])
    assert err.code == "chain_cycle"
    cycle = problems(err)[0]
    assert (cycle["code"], cycle["node_id"], cycle["field"]) == ("chain_cycle", "a", "next_node")
    assert cycle["path"] == ["a", "a"]
    assert "a → a" in cycle["message"]


def test_node_reading_its_own_output_is_a_cycle() -> None:
    err = refusal([{"node_id": "a", "input_map": {"x": "a.output"}}])
    assert err.code == "chain_cycle"
    assert problems(err)[0]["path"] == ["a", "a"]


def test_branch_back_edge_is_a_cycle_with_its_path() -> None:
    err = refusal([{"node_id": "a", "next_node": "b"},
                   {"node_id": "b", "kind": "branch", "condition": "input.again",
                    "true_node": "a", "false_node": "c"},
                   {"node_id": "c"}])
    assert err.code == "chain_cycle"
    cycle = problems(err)[0]
    assert cycle["path"] == ["a", "b", "a"]
    assert "a → b → a" in cycle["message"]
    assert "a → b → a" in err.message


def test_on_error_back_edge_is_a_cycle() -> None:
    err = refusal([{"node_id": "a", "on_error": "b"}, {"node_id": "b", "next_node": "a"}])
    assert err.code == "chain_cycle"
    cycle = problems(err)[0]
    assert cycle["path"] == ["a", "b", "a"]
    assert (cycle["node_id"], cycle["field"]) == ("a", "on_error")


def test_data_edges_close_cycles_too() -> None:
    err = refusal([{"node_id": "a", "next_node": "b"},
                   {"node_id": "b", "next_node": "c"},
                   {"node_id": "c"},
                   {"node_id": "d", "input_map": {"x": "c.output"}, "next_node": "b"}])
    assert err.code == "chain_cycle"
    assert problems(err)[0]["path"] == ["b", "c", "d", "b"]


def test_each_separate_cycle_is_reported() -> None:
    err = refusal([{"node_id": "a", "next_node": "b"}, {"node_id": "b", "next_node": "a"},
                   {"node_id": "c", "next_node": "d"}, {"node_id": "d", "next_node": "c"}])
    paths = [p["path"] for p in problems(err) if p["code"] == "chain_cycle"]
    assert paths == [["a", "b", "a"], ["c", "d", "c"]]


# ── ids, kinds, catalog, capabilities ───────────────────────────────────────


def test_duplicate_node_id_is_rejected() -> None:
    err = refusal([{"node_id": "a"}, {"node_id": "a"}])
    assert where(err) == {("chain_invalid", "a", "node_id")}
    assert "nodes[0] and nodes[1]" in problems(err)[0]["message"]


@pytest.mark.parametrize("reserved", ["input", "output", "item", "_item", "index", "error",
                                      "abort", "skip"])
def test_reserved_node_id_is_rejected(reserved: str) -> None:
    err = refusal([{"node_id": reserved}], reserved)
    assert ("chain_invalid", reserved, "node_id") in where(err)


def test_unknown_kind_is_rejected_with_a_suggestion() -> None:
    err = refusal([{"node_id": "a", "kind": "tol"}])
    assert where(err) == {("chain_invalid", "a", "kind")}
    assert "did you mean 'tool'?" in problems(err)[0]["message"]


def test_unregistered_tool_suggests_the_catalog_name() -> None:
    err = refusal([{"node_id": "a", "name": "reed_file"}])
    assert where(err) == {("chain_invalid", "a", "name")}
    assert "unknown tool 'reed_file'; did you mean 'read_file'?" in problems(err)[0]["message"]


def test_unregistered_skill_is_rejected() -> None:
    err = refusal([{"node_id": "a", "kind": "skill", "name": "sumarize"}])
    assert "did you mean 'summarize'?" in problems(err)[0]["message"]


def test_tool_without_name_is_rejected() -> None:
    err = refusal([{"node_id": "a", "name": ""}])
    assert where(err) == {("chain_invalid", "a", "name")}


@pytest.mark.parametrize(("kind", "extra"), [("skill", {"name": "summarize"}), ("proc", {})])
def test_capability_not_granted_is_rejected(kind: str, extra: dict[str, Any]) -> None:
    err = refusal([{"node_id": "a", "kind": kind, **extra}], granted=frozenset({"chains"}))
    assert where(err) == {("chain_invalid", "a", "kind")}
    assert f"'{kind}' capability" in problems(err)[0]["message"]


def test_proc_refused_by_the_catalog_is_rejected_with_its_message() -> None:
    catalog = FakeCatalog(proc_refusal="executable 'rm' is not in allow_proc")
    err = refusal([{"node_id": "a", "kind": "proc", "input": {"argv": ["rm"]}}],
                  catalog=catalog)
    assert problems(err)[0]["message"] == "executable 'rm' is not in allow_proc"
    assert problems(err)[0]["node_id"] == "a"


# ── branch and map shapes ───────────────────────────────────────────────────


def test_branch_without_condition_or_targets_is_rejected() -> None:
    err = refusal([{"node_id": "a", "kind": "branch"}])
    assert where(err) == {("chain_invalid", "a", "condition"), ("chain_invalid", "a", "true_node")}


def test_map_without_items_path_or_map_node_is_rejected() -> None:
    err = refusal([{"node_id": "a", "kind": "map"}])
    assert where(err) == {("chain_invalid", "a", "items_path"), ("chain_invalid", "a", "map_node")}


def test_branch_field_on_a_tool_is_rejected() -> None:
    err = refusal([{"node_id": "a", "condition": "input.x"}])
    assert where(err) == {("chain_invalid", "a", "condition")}


def test_template_also_reached_by_next_node_is_rejected() -> None:
    err = refusal([{"node_id": "a", "next_node": "t"},
                   {"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t"},
                   {"node_id": "t"}])
    assert where(err) == {("chain_invalid", "a", "next_node")}


def test_template_used_by_two_maps_is_rejected() -> None:
    err = refusal([{"node_id": "a", "kind": "map", "items_path": "input.xs", "map_node": "t"},
                   {"node_id": "b", "kind": "map", "items_path": "input.xs", "map_node": "t"},
                   {"node_id": "t"}])
    assert where(err) == {("chain_invalid", "t", "node_id")}


@pytest.mark.parametrize(
    "template",
    [
        {"node_id": "t", "kind": "branch", "condition": "input.x", "true_node": "z"},
        {"node_id": "t", "kind": "map", "items_path": "input.xs", "map_node": "z"},
    ],
)
def test_branch_or_map_as_template_is_rejected(template: dict[str, Any]) -> None:
    err = refusal([{"node_id": "a", "kind": "map", "items_path": "input.xs", "map_node": "t"},
                   template, {"node_id": "z"}])
    assert where(err) == {("chain_invalid", "a", "map_node")}
    assert f"is a {template['kind']} node" in problems(err)[0]["message"]


def test_template_with_next_node_or_handler_is_rejected() -> None:
    err = refusal([{"node_id": "a", "kind": "map", "items_path": "input.xs", "map_node": "t"},
                   {"node_id": "t", "next_node": "z", "on_error": "z"},
                   {"node_id": "z"}])
    assert where(err) == {("chain_invalid", "t", "next_node"), ("chain_invalid", "t", "on_error")}


def test_template_may_skip_on_error() -> None:
    plan = validate([{"node_id": "a", "kind": "map", "items_path": "input.xs", "map_node": "t"},
                     {"node_id": "t", "on_error": "skip"}])
    assert plan.nodes[1].on_error == "skip"


def test_reading_a_template_output_is_rejected() -> None:
    err = refusal([{"node_id": "a", "kind": "map", "items_path": "input.xs", "map_node": "t",
                    "next_node": "b"},
                   {"node_id": "t"},
                   {"node_id": "b", "input_map": {"x": "t.output"}}])
    assert where(err) == {("chain_invalid", "b", "input_map.x")}
    assert "a.output" in problems(err)[0]["hint"]


# ── expressions ─────────────────────────────────────────────────────────────


def test_bare_number_in_condition_names_node_field_and_column() -> None:
    err = refusal([{"node_id": "a", "kind": "branch", "condition": "input.count > 0",
                    "true_node": "b"}, {"node_id": "b"}])
    problem = problems(err)[0]
    assert (problem["node_id"], problem["field"], problem["column"]) == ("a", "condition", 15)
    assert "column 15" in problem["message"]


def test_every_expression_of_every_node_is_compiled() -> None:
    err = refusal([
        {"node_id": "a", "next_node": "b", "input_map": {"x": "input.", "y": "input.y"}},
        {"node_id": "b", "kind": "branch", "condition": "a.output ==", "false_node": "c"},
        {"node_id": "c", "kind": "map", "items_path": "input[", "map_node": "d"},
        {"node_id": "d", "input_map": {"z": "item |"}},
    ])
    assert {(p["node_id"], p["field"]) for p in problems(err)} == {
        ("a", "input_map.x"), ("b", "condition"), ("c", "items_path"), ("d", "input_map.z")}
    assert {p["code"] for p in problems(err)} == {"chain_invalid"}


# ── chain level ─────────────────────────────────────────────────────────────


def test_empty_nodes_is_rejected() -> None:
    err = refusal([], "a")
    assert ("chain_invalid", "", "nodes") in where(err)


@pytest.mark.parametrize(("entry", "words"), [("", "empty"), ("zz", "not a node"),
                                              ("b", "not a root")])
def test_entry_node_must_name_a_root(entry: str, words: str) -> None:
    err = refusal([{"node_id": "a", "next_node": "b"}, {"node_id": "b"}], entry)
    assert where(err) == {("chain_invalid", entry if words == "not a root" else "", "entry_node")}
    assert words in problems(err)[0]["message"]


def test_entry_node_may_not_be_a_template() -> None:
    err = refusal([{"node_id": "a", "kind": "map", "items_path": "input.xs", "map_node": "t"},
                   {"node_id": "t"}], "t")
    assert where(err) == {("chain_invalid", "t", "entry_node")}


@pytest.mark.parametrize("timeout", [0, -5])
def test_timeout_must_be_positive(timeout: int) -> None:
    err = refusal([{"node_id": "a"}], timeout=timeout)
    assert where(err) == {("chain_invalid", "", "timeout")}


# ── ceilings ────────────────────────────────────────────────────────────────


def test_too_many_nodes_is_a_chain_limit_at_session_scope() -> None:
    nodes = [{"node_id": f"n{i}"} for i in range(4)]
    err = refusal(nodes, "n0", asked={"max_nodes": 3})
    assert err.code == "chain_limit"
    problem = problems(err)[0]
    assert {k: problem[k] for k in ("ceiling", "scope", "limit", "requested", "field")} == {
        "ceiling": "max_nodes", "scope": "session", "limit": 3, "requested": 4, "field": "nodes"}


def test_timeout_above_max_timeout_is_a_chain_limit_at_host_scope() -> None:
    err = refusal([{"node_id": "a"}], limits=Limits(max_timeout=60), timeout=61)
    problem = problems(err)[0]
    assert (err.code, problem["ceiling"], problem["scope"], problem["limit"],
            problem["requested"]) == ("chain_limit", "max_timeout", "host", 60, 61)


def test_timeout_at_max_timeout_is_accepted() -> None:
    plan = validate([{"node_id": "a"}], limits=Limits(max_timeout=60), timeout=60)
    assert plan.timeout == 60.0


def test_literal_items_beyond_max_map_items_is_a_chain_limit() -> None:
    err = refusal([{"node_id": "a", "kind": "map", "items_path": "`[1, 2, 3]`", "map_node": "t"},
                   {"node_id": "t"}], limits=Limits(max_map_items=2))
    problem = problems(err)[0]
    assert (err.code, problem["node_id"], problem["field"], problem["ceiling"],
            problem["requested"]) == ("chain_limit", "a", "items_path", "max_map_items", 3)


def test_literal_items_within_max_map_items_is_accepted() -> None:
    plan = validate([{"node_id": "a", "kind": "map", "items_path": "`[1, 2]`", "map_node": "t"},
                     {"node_id": "t"}], limits=Limits(max_map_items=2))
    assert plan.nodes[0].items_path is not None


# ── all at once ─────────────────────────────────────────────────────────────


def test_three_problems_come_in_one_refusal() -> None:
    err = refusal([{"node_id": "a", "name": "reed_file", "next_node": "b"},
                   {"node_id": "b", "kind": "sklil"},
                   {"node_id": "c", "input_map": {"x": "input.n > 1"}}])
    assert where(err) == {("chain_invalid", "a", "name"), ("chain_invalid", "b", "kind"),
                          ("chain_invalid", "c", "input_map.x")}
    assert err.message.startswith("chain is invalid (3 problems); first: node 'a' field 'name'")
    assert err.node_id == "a"


def test_code_precedence_is_cycle_then_limit_then_invalid() -> None:
    nodes = [{"node_id": "a", "next_node": "a", "name": "nope"}, {"node_id": "b"}]
    err = refusal(nodes, limits=Limits(max_nodes=1))
    assert err.code == "chain_cycle"
    assert [p["code"] for p in problems(err)][:2] == ["chain_cycle", "chain_limit"]
    err = refusal([{"node_id": "a", "name": "nope"}, {"node_id": "b"}],
                  limits=Limits(max_nodes=1))
    assert err.code == "chain_limit"
    assert [p["code"] for p in problems(err)] == ["chain_limit", "chain_invalid"]


def test_a_refusal_lists_the_first_problems_in_precedence_order_and_counts_them_all() -> None:
    # 150 unknown tools (found first), then 101 self-loops: the cycles lead the listing
    nodes = [{"node_id": f"t{i}", "name": "nope"} for i in range(150)]
    nodes += [{"node_id": f"c{i}", "next_node": f"c{i}"} for i in range(MAX_PROBLEMS + 1)]
    err = refusal(nodes, "t0", limits=Limits(max_nodes=1))
    listed = problems(err)
    total = 150 + MAX_PROBLEMS + 1 + 1  # and one max_nodes ceiling
    assert (err.code, err.node_id) == ("chain_cycle", "c0")
    assert (err.details["problems_total"], err.details["problems_listed"]) == (
        total, MAX_PROBLEMS)
    assert [(p["code"], p["node_id"]) for p in listed] == [
        ("chain_cycle", f"c{i}") for i in range(MAX_PROBLEMS)]
    assert err.message.startswith(
        f"chain is invalid ({total} problems, the first {MAX_PROBLEMS} listed in "
        "details.errors); first: node 'c0' field 'next_node'")


def test_a_ceiling_found_after_the_cap_still_leads_the_refusal() -> None:
    nodes = [{"node_id": f"t{i}", "name": "nope"} for i in range(MAX_PROBLEMS + 50)]
    err = refusal(nodes, "t0", limits=Limits(max_timeout=1), timeout=2)
    assert err.code == "chain_limit"
    assert (err.details["ceiling"], err.details["problems_total"]) == (
        "max_timeout", MAX_PROBLEMS + 51)
    listed = problems(err)
    assert [p["code"] for p in listed[:2]] == ["chain_limit", "chain_invalid"]
    assert listed[-1]["node_id"] == f"t{MAX_PROBLEMS - 2}"


def test_a_refusal_within_the_cap_lists_every_problem_and_adds_no_count() -> None:
    nodes = [{"node_id": f"t{i}", "name": "nope"} for i in range(MAX_PROBLEMS)]
    err = refusal(nodes, "t0")
    assert len(problems(err)) == MAX_PROBLEMS
    assert list(err.details) == ["errors"]


def test_every_problem_has_the_documented_keys() -> None:
    err = refusal([{"node_id": "a", "next_node": "a", "name": "nope"}],
                  limits=Limits(max_timeout=1), timeout=2)
    for problem in problems(err):
        assert {"code", "node_id", "field", "message", "hint"} <= problem.keys()
        assert problem["message"] and problem["hint"]


class PackCatalog(FakeCatalog):
    """A catalog that knows which installed pack, not enabled, provides a tool."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def pack_providing(self, tool_name: str) -> str | None:
        self.asked.append(tool_name)
        return {"upper": "conformance"}.get(tool_name)


def test_an_unknown_tool_of_an_installed_pack_names_the_pack_and_how_to_enable_it() -> None:
    catalog = PackCatalog()
    err = refusal([{"node_id": "a", "name": "upper", "next_node": "b"},
                   {"node_id": "b", "name": "reed_file"}, {"node_id": "c", "name": "add"}],
                  catalog=catalog)
    by_node = {p["node_id"]: p for p in problems(err)}
    assert by_node["a"]["message"] == (
        "unknown tool 'upper'; it is in the 'conformance' pack, which is not enabled")
    assert by_node["a"]["hint"].startswith("enable it with --tools +conformance")
    # no pack provides it: the usual suggestion and hint
    assert by_node["b"]["message"] == "unknown tool 'reed_file'; did you mean 'read_file'?"
    assert "enable the pack that provides it" in by_node["b"]["hint"]
    assert "c" not in by_node
    assert catalog.asked == ["upper", "reed_file"]  # asked for unknown tools only
