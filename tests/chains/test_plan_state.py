"""The pure readiness machine: which nodes become ready or skipped as nodes finish
(PROTOCOL.md §3 ``output``, §4 readiness, §5 errors).

Each case is a chain and a script of what happened; after every step the exact
``(ready, skipped)`` the plan answers is checked, as node ids.
"""

from __future__ import annotations

from typing import Any

import pytest

from a2e_host.chains.plan import NodeStatus, PlanState
from a2e_host.chains.validation import ChainPlan
from tests.support.chains import plan_of


def names(plan: ChainPlan, indexes: list[int]) -> list[str]:
    return [plan.nodes[i].node_id for i in indexes]


def step(plan: ChainPlan, state: PlanState, action: tuple[str, ...]) -> tuple[list[str], ...]:
    """Apply ``("done", id)``, ``("done", id, taken_id)`` or ``("fail", id)``."""
    verb, node_id, *rest = action
    index = plan.by_id[node_id]
    state.node_started(index)
    if verb == "done":
        taken = plan.by_id[rest[0]] if rest else None
        ready, skipped = state.node_done(index, taken)
    else:
        assert verb == "fail"
        ready, skipped = state.node_failed(index)
    return names(plan, ready), names(plan, skipped)


def branch(node_id: str, true: str = "", false: str = "", **more: Any) -> dict[str, Any]:
    return {
        "node_id": node_id,
        "kind": "branch",
        "condition": "input.flag",
        "true_node": true,
        "false_node": false,
        **more,
    }


JOIN = [
    branch("route", "a", "b"),
    {"node_id": "a", "next_node": "join"},
    {"node_id": "b", "next_node": "join"},
    {"node_id": "join", "input_map": {"a": "a.output", "b": "b.output"}},
]

# (name, nodes, roots, script of (action, expected ready, expected skipped))
CASES: list[tuple[str, list[dict[str, Any]], list[str], list[tuple[Any, list[str], list[str]]]]]
CASES = [
    (
        "linear",
        [{"node_id": "a", "next_node": "b"}, {"node_id": "b", "next_node": "c"}, {"node_id": "c"}],
        ["a"],
        [(("done", "a"), ["b"], []), (("done", "b"), ["c"], []), (("done", "c"), [], [])],
    ),
    (
        "several roots start together in declaration order",
        [{"node_id": "x"}, {"node_id": "y"}, {"node_id": "z", "input_map": {"v": "y.output"}}],
        ["x", "y"],
        [(("done", "y"), ["z"], []), (("done", "x"), [], []), (("done", "z"), [], [])],
    ),
    (
        "fan-out then fan-in waits for every input",
        [
            {"node_id": "r"},
            {"node_id": "a", "input_map": {"v": "r.output"}},
            {"node_id": "b", "input_map": {"v": "r.output"}},
            {"node_id": "j", "input_map": {"a": "a.output", "b": "b.output"}},
        ],
        ["r"],
        [
            (("done", "r"), ["a", "b"], []),
            (("done", "b"), [], []),
            (("done", "a"), ["j"], []),
            (("done", "j"), [], []),
        ],
    ),
    (
        "diamond of a control and a data path",
        [
            {"node_id": "r", "next_node": "a"},
            {"node_id": "a", "next_node": "d"},
            {"node_id": "b", "input_map": {"v": "r.output"}},
            {"node_id": "d", "input_map": {"v": "b.output"}},
        ],
        ["r"],
        [
            (("done", "r"), ["a", "b"], []),
            (("done", "a"), [], []),
            (("done", "b"), ["d"], []),
            (("done", "d"), [], []),
        ],
    ),
    (
        "branch true: the false side is skipped and the join runs once",
        JOIN,
        ["route"],
        [
            (("done", "route", "a"), ["a"], ["b"]),
            (("done", "a"), ["join"], []),
            (("done", "join"), [], []),
        ],
    ),
    (
        "branch false: the true side is skipped and the join runs once",
        JOIN,
        ["route"],
        [
            (("done", "route", "b"), ["b"], ["a"]),
            (("done", "b"), ["join"], []),
            (("done", "join"), [], []),
        ],
    ),
    (
        "branch with no side for its result skips both sides and the join",
        [branch("route", "a"), {"node_id": "a", "next_node": "join"}, {"node_id": "join"}],
        ["route"],
        [(("done", "route"), [], ["a", "join"])],
    ),
    (
        "a skip reaches exclusive descendants but not shared ones",
        [
            branch("route", "a", "b"),
            {"node_id": "a", "next_node": "shared"},
            {"node_id": "b", "next_node": "c"},
            {"node_id": "c", "next_node": "d"},
            {"node_id": "d", "next_node": "shared"},
            {"node_id": "shared"},
        ],
        ["route"],
        [
            (("done", "route", "a"), ["a"], ["b", "c", "d"]),
            (("done", "a"), ["shared"], []),
            (("done", "shared"), [], []),
        ],
    ),
    (
        "a data-only node whose source was skipped is skipped",
        [
            branch("route", "a", "b"),
            {"node_id": "a"},
            {"node_id": "b"},
            {"node_id": "reader", "input_map": {"v": "b.output"}},
        ],
        ["route"],
        [(("done", "route", "a"), ["a"], ["b", "reader"]), (("done", "a"), [], [])],
    ),
    (
        "a data-only node runs when one of its sources fired",
        [
            branch("route", "a", "b"),
            {"node_id": "a"},
            {"node_id": "b"},
            {"node_id": "reader", "input_map": {"x": "a.output", "y": "b.output"}},
        ],
        ["route"],
        [
            (("done", "route", "b"), ["b"], ["a"]),
            (("done", "b"), ["reader"], []),
            (("done", "reader"), [], []),
        ],
    ),
    (
        "a node with a control edge that did not fire is skipped even if its data fired",
        [
            branch("route", "a", "b"),
            {"node_id": "a", "next_node": "c"},
            {"node_id": "b"},
            {"node_id": "c", "input_map": {"v": "b.output"}},
        ],
        ["route"],
        [(("done", "route", "b"), ["b"], ["a"]), (("done", "b"), [], ["c"])],
    ),
    (
        "on_error skip: next_node and data successors go on",
        [
            {"node_id": "x", "on_error": "skip", "next_node": "y"},
            {"node_id": "y"},
            {"node_id": "z", "input_map": {"v": "x.output"}},
        ],
        ["x"],
        [(("fail", "x"), ["y", "z"], []), (("done", "y"), [], []), (("done", "z"), [], [])],
    ),
    (
        "a failed branch under skip takes neither side but its next_node runs",
        [
            branch("route", "a", "b", on_error="skip", next_node="after"),
            {"node_id": "a"},
            {"node_id": "b"},
            {"node_id": "after"},
        ],
        ["route"],
        [(("fail", "route"), ["after"], ["a", "b"]), (("done", "after"), [], [])],
    ),
    (
        "on_error handler: the handler fires and the other successors are skipped",
        [
            {"node_id": "x", "on_error": "h", "next_node": "y"},
            {"node_id": "y", "next_node": "y2"},
            {"node_id": "y2"},
            {"node_id": "z", "input_map": {"v": "x.output"}},
            {"node_id": "h", "input_map": {"e": "error"}},
        ],
        ["x"],
        [(("fail", "x"), ["h"], ["y", "y2", "z"]), (("done", "h"), [], [])],
    ),
    (
        "a handler whose node succeeded is skipped",
        [{"node_id": "x", "on_error": "h", "next_node": "y"}, {"node_id": "y"}, {"node_id": "h"}],
        ["x"],
        [(("done", "x"), ["y"], ["h"]), (("done", "y"), [], [])],
    ),
    (
        "a map runs as one node and its template is outside the machine",
        [
            {
                "node_id": "m",
                "kind": "map",
                "items_path": "input.xs",
                "map_node": "t",
                "next_node": "after",
            },
            {"node_id": "t"},
            {"node_id": "after", "input_map": {"v": "m.output"}},
        ],
        ["m"],
        [(("done", "m"), ["after"], []), (("done", "after"), [], [])],
    ),
]


@pytest.mark.parametrize(
    ("nodes", "roots", "script"),
    [pytest.param(nodes, roots, script, id=name) for name, nodes, roots, script in CASES],
)
def test_readiness_follows_the_script(
    nodes: list[dict[str, Any]], roots: list[str], script: list[tuple[Any, list[str], list[str]]]
) -> None:
    plan = plan_of(nodes)
    state = PlanState(plan)
    assert names(plan, state.start()) == roots
    for action, ready, skipped in script:
        assert not state.finished, f"finished before {action}"
        got_ready, got_skipped = step(plan, state, action)
        # the spec orders neither list: compare them as sets (each node decided once)
        assert len(set(got_ready + got_skipped)) == len(got_ready + got_skipped)
        assert (sorted(got_ready), sorted(got_skipped)) == (sorted(ready), sorted(skipped)), (
            f"after {action}"
        )
    assert state.finished, "every declared node is finished or skipped after the script"


def test_join_after_a_branch_is_decided_exactly_once() -> None:
    plan = plan_of(JOIN)
    state = PlanState(plan)
    state.start()
    decided: list[str] = []
    for action in (("done", "route", "a"), ("done", "a")):
        ready, skipped = step(plan, state, action)
        decided += ready + skipped
    assert decided.count("join") == 1
    assert state.status[plan.by_id["join"]] == NodeStatus.READY
    assert state.status[plan.by_id["b"]] == NodeStatus.SKIP


def test_statuses_after_a_handled_failure() -> None:
    plan = plan_of(
        [{"node_id": "x", "on_error": "h", "next_node": "y"}, {"node_id": "y"}, {"node_id": "h"}]
    )
    state = PlanState(plan)
    state.start()
    step(plan, state, ("fail", "x"))
    assert [NodeStatus.NAMES[s] for s in state.status] == ["error", "skip", "ready"]
    assert state.handled_by == {plan.by_id["h"]: plan.by_id["x"]}


def activators(plan: ChainPlan, state: PlanState) -> dict[str, str | None]:
    return {
        n.node_id: (
            plan.nodes[state.activator[n.index]].node_id if state.activator[n.index] >= 0 else None
        )
        for n in plan.nodes
        if state.status[n.index] == NodeStatus.READY
    }


@pytest.mark.parametrize(
    ("nodes", "script", "expected"),
    [
        pytest.param(
            [{"node_id": "a", "next_node": "b"}, {"node_id": "b"}],
            [("done", "a")],
            {"b": "a"},
            id="next_node",
        ),
        pytest.param(
            JOIN,
            [("done", "route", "a"), ("done", "a")],
            {"join": "a"},
            id="join after a branch: only the side that ran activates",
        ),
        pytest.param(
            [branch("route", "a", "b"), {"node_id": "a"}, {"node_id": "b"}],
            [("done", "route", "b")],
            {"b": "route"},
            id="branch side",
        ),
        pytest.param(
            [
                {"node_id": "p"},
                {"node_id": "q"},
                {"node_id": "a", "input_map": {"v": "p.output"}, "next_node": "j"},
                {"node_id": "b", "input_map": {"v": "q.output"}, "next_node": "j"},
                {"node_id": "j"},
            ],
            [("done", "p"), ("done", "q"), ("done", "a"), ("done", "b")],
            {"j": None},
            id="several activators give -1",
        ),
        pytest.param(
            [
                {"node_id": "r", "next_node": "a"},
                {"node_id": "d"},
                {"node_id": "a", "input_map": {"v": "d.output"}},
            ],
            [("done", "d"), ("done", "r")],
            {"a": "r"},
            id="a data edge does not activate",
        ),
        pytest.param(
            [{"node_id": "d"}, {"node_id": "a", "input_map": {"v": "d.output"}}],
            [("done", "d")],
            {"a": None},
            id="data only: no activator",
        ),
        pytest.param(
            [{"node_id": "x", "on_error": "h"}, {"node_id": "h"}],
            [("fail", "x")],
            {"h": None},
            id="an on_error edge does not activate",
        ),
        pytest.param(
            [{"node_id": "x", "on_error": "skip", "next_node": "y"}, {"node_id": "y"}],
            [("fail", "x")],
            {"y": "x"},
            id="a next_node under skip activates",
        ),
        pytest.param(
            [{"node_id": "x", "on_error": "h"}, branch("route", "h"), {"node_id": "h"}],
            [("fail", "x"), ("done", "route", "h")],
            {"h": "route"},
            id="a handler edge then a branch side: the side activates",
        ),
        pytest.param(
            [{"node_id": "x", "on_error": "h"}, branch("route", "h"), {"node_id": "h"}],
            [("done", "route", "h"), ("fail", "x")],
            {"h": "route"},
            id="a branch side then a handler edge: the side activates",
        ),
    ],
)
def test_activator_is_the_single_activating_predecessor(
    nodes: list[dict[str, Any]], script: list[tuple[str, ...]], expected: dict[str, str | None]
) -> None:
    plan = plan_of(nodes)
    state = PlanState(plan)
    state.start()
    for action in script:
        step(plan, state, action)
    assert activators(plan, state) == expected, (
        "PROTOCOL.md §3: output comes from the single node whose next_node / true_node / "
        "false_node fired; on_error and data edges never activate"
    )


def test_finished_only_after_the_last_node() -> None:
    plan = plan_of([{"node_id": "a"}, {"node_id": "b"}])
    state = PlanState(plan)
    state.start()
    assert not state.finished
    step(plan, state, ("done", "b"))
    assert not state.finished
    step(plan, state, ("done", "a"))
    assert state.finished


def test_finished_counts_skipped_nodes_as_finished() -> None:
    plan = plan_of(
        [
            branch("route", "a", "b"),
            {"node_id": "a"},
            {"node_id": "b", "next_node": "c"},
            {"node_id": "c"},
        ]
    )
    state = PlanState(plan)
    state.start()
    step(plan, state, ("done", "route", "a"))
    assert not state.finished
    step(plan, state, ("done", "a"))
    assert state.finished
