"""Validation is linear and iterative: deep and wide chains validate without recursion
limits (PROTOCOL.md §4). Timing lives in the benchmarks, not here."""

from __future__ import annotations

from typing import Any

import pytest

from a2e_host.chains.messages import ChainNode, ChainRequest
from a2e_host.chains.validation import ChainPlan, EdgeKind, validate_chain
from a2e_host.exceptions import ChainInvalid
from a2e_host.limits import Limits, SessionLimits
from tests.support.chains import FakeCatalog


def validate(nodes: list[dict[str, Any]], entry: str) -> ChainPlan:
    request = ChainRequest(
        nodes=[ChainNode(**{"kind": "tool", "name": "echo", **n}) for n in nodes],
        entry_node=entry,
    )
    return validate_chain(request, FakeCatalog(tools=("echo",), skills=()), SessionLimits(Limits()),
                          granted=frozenset({"chains"}))


def linear(count: int) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = [
        {"node_id": f"n{i}", "next_node": f"n{i + 1}", "input_map": {"prev": f"n{i - 1}.output"}}
        for i in range(count)
    ]
    nodes[0]["input_map"] = {}
    nodes[-1]["next_node"] = ""
    return nodes


def test_five_thousand_node_linear_chain_validates() -> None:
    plan = validate(linear(5000), "n0")
    assert len(plan.nodes) == 5000
    assert plan.roots == (0,)
    assert plan.terminals == (4999,)
    assert plan.nodes[2500].out_edges == ((2501, EdgeKind.NEXT | EdgeKind.DATA),)
    assert all(node.pred_count == 1 for node in plan.nodes[1:])


def test_five_thousand_node_ring_is_a_cycle() -> None:
    nodes = linear(5000)
    nodes[-1]["next_node"] = "n0"
    with pytest.raises(ChainInvalid) as info:
        validate(nodes, "n0")
    assert info.value.code == "chain_cycle"
    cycles = [p for p in info.value.details["errors"] if p["code"] == "chain_cycle"]
    assert len(cycles) == 1
    path = cycles[0]["path"]
    assert path[0] == path[-1] == "n0"
    assert len(path) == 5001


def stacked_diamonds(count: int) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = []
    for i in range(count):
        after = f"b{i + 1}" if i + 1 < count else "end"
        nodes += [
            {"node_id": f"b{i}", "kind": "branch", "condition": f"input.flags[{i}]",
             "true_node": f"x{i}", "false_node": f"y{i}"},
            {"node_id": f"x{i}", "next_node": after},
            {"node_id": f"y{i}", "next_node": after},
        ]
    nodes.append({"node_id": "end"})
    return nodes


def test_thirty_stacked_diamonds_validate() -> None:
    plan = validate(stacked_diamonds(30), "b0")
    assert len(plan.nodes) == 91
    assert plan.roots == (0,)
    assert [plan.nodes[i].node_id for i in plan.terminals] == ["end"]
    joins = [n for n in plan.nodes if n.node_id.startswith("b") and n.node_id != "b0"]
    assert len(joins) == 29 and all(n.pred_count == 2 for n in joins)


def test_wide_fan_in_counts_every_predecessor() -> None:
    nodes: list[dict[str, Any]] = [{"node_id": f"w{i}"} for i in range(2000)]
    nodes.append({"node_id": "sink",
                  "input_map": {f"k{i}": f"w{i}.output" for i in range(2000)}})
    plan = validate(nodes, "w0")
    assert plan.nodes[-1].pred_count == 2000
    assert len(plan.roots) == 2000
    assert plan.terminals == (2000,)
