"""The run page's layered DAG layout: longest-path layers, fewer crossings, cycles placed."""

from __future__ import annotations

from a2e_host.commands.dag_layout import layered_layout


def test_a_node_sits_one_layer_below_its_deepest_predecessor() -> None:
    layout = layered_layout(["a", "b", "c", "d"],
                            [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d"), ("a", "d")])
    assert layout.layer == {"a": 0, "b": 1, "c": 2, "d": 3}
    assert layout.layers == [["a"], ["b"], ["c"], ["d"]]


def test_a_layer_is_ordered_under_its_predecessors() -> None:
    # declared y1 before x1, but x1 hangs under x and y1 under y: drawn x1 left of y1
    layout = layered_layout(["x", "y", "y1", "x1"], [("x", "x1"), ("y", "y1")])
    assert layout.layers == [["x", "y"], ["x1", "y1"]]
    assert layout.widest == 2


def test_a_cycle_unknown_ids_and_self_edges_still_get_places() -> None:
    layout = layered_layout(["a", "b", "c", "a"],
                            [("a", "b"), ("b", "c"), ("c", "b"), ("c", "c"), ("a", "zz")])
    assert layout.layer == {"a": 0, "b": 1, "c": 2}
    assert sorted(layout.slot) == ["a", "b", "c"]
    assert layered_layout([], []).widest == 0
