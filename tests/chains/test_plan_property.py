"""PlanState on random DAGs (hypothesis): readiness follows PROTOCOL.md §4 exactly.

A random chain of tools, branches and failing nodes (edges only point forward, so it is
acyclic) is driven to the end in a random order of ready nodes. Checked against the
rules written out independently here: a node is decided once, only after every
predecessor finished; it runs iff a control edge fired (or, with only data edges, a data
edge fired); the machine ends finished with every node decided.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from a2e_host.chains.plan import NodeStatus, PlanState
from tests.support.chains import plan_of


@st.composite
def chains(draw: st.DrawFn) -> tuple[list[dict[str, Any]], list[str]]:
    n = draw(st.integers(2, 9))
    ids = [f"n{i}" for i in range(n)]
    nodes: list[dict[str, Any]] = []
    outcome: list[str] = []  # per node: "done" | "fail"
    for i, node_id in enumerate(ids):
        later = ids[i + 1:]
        node: dict[str, Any] = {"node_id": node_id}
        pick = st.sampled_from(["", *later]) if later else st.just("")
        if later and draw(st.booleans()) and draw(st.booleans()):
            node.update(kind="branch", condition="input.flag",
                        true_node=draw(pick), false_node=draw(pick))
            if not (node["true_node"] or node["false_node"]):
                node["true_node"] = later[0]
        else:
            node["next_node"] = draw(pick)
            reads = draw(st.lists(st.sampled_from(ids[:i]), max_size=2, unique=True)) if i else []
            node["input_map"] = {f"r{k}": f"{src}.output" for k, src in enumerate(reads)}
            failing = draw(st.booleans()) and draw(st.booleans())
            if failing:
                node["on_error"] = draw(st.sampled_from(["skip", *later])) if later else "skip"
            outcome.append("fail" if failing else "done")
            nodes.append(node)
            continue
        outcome.append("done")
        nodes.append(node)
    return nodes, outcome


@settings(max_examples=150, deadline=None)
@given(chains(), st.randoms(use_true_random=False), st.booleans())
def test_readiness_on_random_dags_follows_the_rules(
    chain: tuple[list[dict[str, Any]], list[str]], rnd: Any, flag: bool
) -> None:
    nodes, outcome = chain
    # nodes that are not reachable as roots would make entry_node invalid; the first
    # node is always a root (nothing points backwards)
    plan = plan_of(nodes)
    state = PlanState(plan)
    n = len(plan.nodes)
    preds: list[set[int]] = [set() for _ in range(n)]
    for src, pnode in enumerate(plan.nodes):
        for dst, _ in pnode.out_edges:
            preds[dst].add(src)
    finished: set[int] = set()
    fired_control: list[set[int]] = [set() for _ in range(n)]
    fired_data: list[set[int]] = [set() for _ in range(n)]
    decided: dict[int, str] = {}
    ready = list(state.start())
    for r in ready:
        assert not preds[r]
        decided[r] = "run"

    def note_fired(src: int, how: str, taken: int | None) -> None:
        pnode = plan.nodes[src]
        for dst, kinds in pnode.out_edges:
            if how == "done":
                control = kinds & 1 or (kinds & 2 and taken == pnode.true_index) or (
                    kinds & 4 and taken == pnode.false_index)
                data = kinds & 16
            elif how == "fail-skip":
                control, data = kinds & 1, kinds & 16
            elif how == "fail-handler":
                control, data = kinds & 8, 0
            else:  # skipped
                control = data = 0
            if control:
                fired_control[dst].add(src)
            if data:
                fired_data[dst].add(src)

    def decide(d: int, runs_now: bool) -> None:
        assert d not in decided, f"{plan.nodes[d].node_id} decided twice"
        assert preds[d] <= finished, f"{plan.nodes[d].node_id} decided before its inputs"
        runs = bool(fired_control[d]) if plan.nodes[d].has_control_preds else bool(
            fired_data[d])
        assert runs == runs_now, plan.nodes[d].node_id
        decided[d] = "run" if runs_now else "skip"

    def absorb(new_ready: list[int], skipped: list[int]) -> None:
        for d in skipped:  # in the order they were decided: a skip cascades forward
            decide(d, False)
            finished.add(d)
            note_fired(d, "skip", None)
        for d in new_ready:
            decide(d, True)
        ready.extend(new_ready)

    while ready:
        i = ready.pop(rnd.randrange(len(ready)))
        state.node_started(i)
        pnode = plan.nodes[i]
        if outcome[i] == "fail":
            how = "fail-skip" if pnode.on_error == "skip" else "fail-handler"
            finished.add(i)
            note_fired(i, how, None)
            absorb(*state.node_failed(i))
        else:
            taken = None
            if pnode.kind == "branch":
                taken = pnode.true_index if flag else pnode.false_index
            finished.add(i)
            note_fired(i, "done", taken)
            absorb(*state.node_done(i, taken))
    assert state.finished
    assert len(decided) == n
    for i, how in decided.items():
        expected = NodeStatus.SKIP if how == "skip" else (
            NodeStatus.ERROR if outcome[i] == "fail" else NodeStatus.DONE)
        assert state.status[i] == expected
