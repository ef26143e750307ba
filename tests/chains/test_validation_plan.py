"""The plan a valid chain compiles to: edges, predecessor counts, roots, terminals,
templates (PROTOCOL.md §4, §5)."""

from __future__ import annotations

from typing import Any

import pytest

from a2e_host.chains.messages import ChainNode, ChainRequest
from a2e_host.chains.validation import ChainPlan, EdgeKind, validate_chain
from a2e_host.limits import Limits, SessionLimits
from tests.support.chains import FakeCatalog

NEXT, TRUE, FALSE, HANDLER, DATA = (
    EdgeKind.NEXT, EdgeKind.TRUE, EdgeKind.FALSE, EdgeKind.HANDLER, EdgeKind.DATA
)


def plan_of(nodes: list[dict[str, Any]], entry: str, **fields: Any) -> ChainPlan:
    request = ChainRequest(
        nodes=[ChainNode(**{"kind": "tool", "name": "echo", **n}) for n in nodes],
        entry_node=entry, **fields,
    )
    return validate_chain(
        request, FakeCatalog(), SessionLimits(Limits()), granted=frozenset({"chains"})
    )


def edges(plan: ChainPlan, node_id: str) -> dict[str, EdgeKind]:
    node = plan.nodes[plan.by_id[node_id]]
    return {plan.nodes[target].node_id: kind for target, kind in node.out_edges}


def ids(plan: ChainPlan, indexes: tuple[int, ...]) -> list[str]:
    return [plan.nodes[i].node_id for i in indexes]


def test_linear_chain_has_one_root_and_one_terminal() -> None:
    plan = plan_of([{"node_id": "a", "next_node": "b"}, {"node_id": "b", "next_node": "c"},
                    {"node_id": "c"}], "a")
    assert ids(plan, plan.roots) == ["a"]
    assert ids(plan, plan.terminals) == ["c"]
    assert [n.pred_count for n in plan.nodes] == [0, 1, 1]
    assert edges(plan, "a") == {"b": NEXT}
    assert plan.nodes[1].next_index == 2
    assert plan.entry == 0


def test_next_and_data_edge_to_the_same_node_are_one_entry() -> None:
    plan = plan_of([{"node_id": "read", "next_node": "sum"},
                    {"node_id": "sum", "input_map": {"text": "read.output"}}], "read")
    assert plan.nodes[0].out_edges == ((1, NEXT | DATA),)
    assert plan.nodes[1].pred_count == 1
    assert plan.nodes[1].has_control_preds is True


def test_data_only_successor_has_no_control_preds() -> None:
    plan = plan_of([{"node_id": "a"}, {"node_id": "b"},
                    {"node_id": "c", "input_map": {"x": "a.output", "y": "length(b.output)"}}],
                   "a")
    assert ids(plan, plan.roots) == ["a", "b"]
    assert edges(plan, "a") == {"c": DATA}
    assert edges(plan, "b") == {"c": DATA}
    c = plan.nodes[2]
    assert (c.pred_count, c.has_control_preds, c.terminal) == (2, False, True)


def test_context_keys_are_not_dependencies() -> None:
    plan = plan_of([{"node_id": "a", "input_map": {"x": "input.x", "y": "output", "z": "error"}}],
                   "a")
    assert plan.nodes[0].pred_count == 0
    assert ids(plan, plan.roots) == ["a"] == ids(plan, plan.terminals)


def test_branch_sides_are_true_and_false_edges() -> None:
    plan = plan_of([
        {"node_id": "check", "kind": "branch", "condition": "input.ok",
         "true_node": "yes", "false_node": "no"},
        {"node_id": "yes", "next_node": "join"},
        {"node_id": "no", "next_node": "join"},
        {"node_id": "join"},
    ], "check")
    assert edges(plan, "check") == {"yes": TRUE, "no": FALSE}
    check = plan.nodes[0]
    assert (check.true_index, check.false_index) == (1, 2)
    assert check.condition is not None and check.condition.text == "input.ok"
    assert plan.nodes[3].pred_count == 2
    assert ids(plan, plan.terminals) == ["join"]


def test_branch_with_both_sides_on_one_node_ors_the_kinds() -> None:
    plan = plan_of([{"node_id": "b", "kind": "branch", "condition": "input.ok",
                     "true_node": "x", "false_node": "x"}, {"node_id": "x"}], "b")
    assert plan.nodes[0].out_edges == ((1, TRUE | FALSE),)
    assert plan.nodes[1].pred_count == 1


def test_on_error_handler_is_a_handler_edge() -> None:
    plan = plan_of([{"node_id": "a", "on_error": "h", "next_node": "b"}, {"node_id": "b"},
                    {"node_id": "h"}], "a")
    a = plan.nodes[0]
    assert (a.on_error, a.handler_index) == ("handler", 2)
    assert edges(plan, "a") == {"b": NEXT, "h": HANDLER}
    assert plan.nodes[2].has_control_preds is True
    assert ids(plan, plan.terminals) == ["b", "h"]


@pytest.mark.parametrize(("written", "mode"), [("", "abort"), ("abort", "abort"), ("skip", "skip")])
def test_on_error_keywords_have_no_handler(written: str, mode: str) -> None:
    plan = plan_of([{"node_id": "a", "on_error": written}], "a")
    assert (plan.nodes[0].on_error, plan.nodes[0].handler_index) == (mode, None)


def test_map_template_runs_only_per_item() -> None:
    plan = plan_of([
        {"node_id": "batch", "kind": "map", "items_path": "input.files",
         "map_node": "one", "next_node": "after"},
        {"node_id": "one", "input_map": {"path": "item"}},
        {"node_id": "after", "input_map": {"all": "batch.output"}},
    ], "batch")
    batch, one, after = plan.nodes
    assert (batch.template_index, one.template_of) == (1, 0)
    assert edges(plan, "batch") == {"after": NEXT | DATA}  # never map → template
    assert (one.pred_count, one.has_control_preds, one.terminal) == (0, False, False)
    assert one.out_edges == ()
    assert ids(plan, plan.roots) == ["batch"]
    assert ids(plan, plan.terminals) == ["after"]
    assert batch.items_path is not None and batch.items_path.text == "input.files"


def test_map_with_nothing_after_it_is_terminal() -> None:
    plan = plan_of([{"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t"},
                    {"node_id": "t"}], "m")
    assert ids(plan, plan.terminals) == ["m"]


def test_template_reads_are_hoisted_onto_its_map() -> None:
    plan = plan_of([
        {"node_id": "cfg"},
        {"node_id": "m", "kind": "map", "items_path": "input.xs", "map_node": "t"},
        {"node_id": "t", "input_map": {"c": "cfg.output", "x": "item"}},
    ], "cfg")
    assert edges(plan, "cfg") == {"m": DATA}
    assert plan.nodes[1].pred_count == 1
    assert plan.nodes[2].pred_count == 0
    assert ids(plan, plan.roots) == ["cfg"]


def test_input_map_keeps_declaration_order_and_compiles_each_value() -> None:
    plan = plan_of([{"node_id": "a", "input_map": {"z": "input.z", "a": "$.input.a"}}], "a")
    assert [(k, e.text) for k, e in plan.nodes[0].input_map] == [("z", "input.z"),
                                                                  ("a", "$.input.a")]
    assert plan.nodes[0].input_map[1][1].search({"input": {"a": 5}}) == 5


def test_timeout_is_float_seconds_within_the_ceiling() -> None:
    plan = plan_of([{"node_id": "a"}], "a", timeout=30)
    assert plan.timeout == 30.0 and isinstance(plan.timeout, float)


def test_plan_is_immutable() -> None:
    plan = plan_of([{"node_id": "a"}], "a")
    with pytest.raises(AttributeError):
        plan.entry = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        plan.by_id["b"] = 1  # type: ignore[index]


def test_skill_and_proc_nodes_validate_when_granted() -> None:
    request = ChainRequest(nodes=[
        ChainNode(node_id="s", kind="skill", name="summarize", next_node="p"),
        ChainNode(node_id="p", kind="proc", input={"argv": ["true"]}),
    ], entry_node="s")
    plan = validate_chain(request, FakeCatalog(), SessionLimits(Limits()),
                          granted=frozenset({"chains", "skill", "proc"}))
    assert [n.kind for n in plan.nodes] == ["skill", "proc"]


def test_diamond_joins_count_each_predecessor_once() -> None:
    plan = plan_of([
        {"node_id": "top", "next_node": "left", "input_map": {}},
        {"node_id": "left", "next_node": "bottom", "input_map": {"t": "top.output"}},
        {"node_id": "right", "input_map": {"t": "top.output"}, "next_node": "bottom"},
        {"node_id": "bottom", "input_map": {"l": "left.output", "r": "right.output"}},
    ], "top")
    assert edges(plan, "top") == {"left": NEXT | DATA, "right": DATA}
    assert [n.pred_count for n in plan.nodes] == [0, 1, 1, 2]
    assert plan.nodes[2].has_control_preds is False
