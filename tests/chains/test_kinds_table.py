"""The node-kind table is the one place a kind is defined (PROTOCOL.md §4, §5, §8).

Every row of :data:`a2e_host.chains.kinds.NODE_KINDS` is known to validation, the plan and
``a2e-host graph``; and a kind added to the table alone (monkeypatched here) is validated,
planned and drawn without any other module changing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

import pytest

from a2e_host.chains import catalog, kinds, skills, validation
from a2e_host.chains.kinds import NODE_KINDS, ControlEdge, Fires, KindSpec, NodeProblem, one_of
from a2e_host.chains.messages import ChainNode, ChainRequest, RetryPolicy
from a2e_host.chains.plan import NodeStatus, PlanState
from a2e_host.chains.validation import ChainPlan, declared_edges, validate_chain
from a2e_host.commands.graph import chain_edges, to_dot, to_mermaid
from a2e_host.exceptions import ChainInvalid
from a2e_host.limits import Limits, SessionLimits

TOOLS = {"echo", "add"}
SKILLS = {"summarize"}
#: A valid value of each own field that is not an expression or a node reference (the
#: recovery fields, PROTOCOL.md §5 Recovery).
SAMPLES: dict[str, Any] = {"retry": RetryPolicy(), "timeout": 5.0, "fallback": "add",
                           "cache": True, "resume": "rerun"}


class Catalog:
    def tool_names(self) -> Collection[str]:
        return TOOLS

    def skill_names(self) -> Collection[str]:
        return SKILLS

    def check_proc(self, node: ChainNode) -> str | None:
        return None


def validate(nodes: list[ChainNode], *, granted: Iterable[str] = ()) -> ChainPlan:
    request = ChainRequest(nodes=nodes, entry_node=nodes[0].node_id)
    return validate_chain(request, Catalog(), SessionLimits(Limits()),
                          granted=frozenset({"chains", *granted}))


def problems_of(nodes: list[ChainNode], **kw: Any) -> list[tuple[str, str, str]]:
    with pytest.raises(ChainInvalid) as info:
        validate(nodes, **kw)
    return [(p["node_id"], p["field"], p["message"]) for p in info.value.details["errors"]]


def chain_for(spec: KindSpec) -> list[ChainNode]:
    """A valid chain whose first node is of ``spec``'s kind, built from its row alone:
    every own field set (control edges to tool nodes, a map's to a template reading
    ``item``), expressions reading ``input``, a registered name."""
    fields: dict[str, Any] = {}
    more: list[ChainNode] = []
    edge_fields = {e.field: e for e in spec.edges}
    for field in spec.own_fields:
        edge = edge_fields.get(field)
        if field in SAMPLES:
            fields[field] = SAMPLES[field]
        elif edge is None:
            fields[field] = "input.items"
        elif edge.edge is None:  # the template relation
            fields[field] = "each"
            more.append(ChainNode(node_id="each", kind="tool", name="echo",
                                  input_map={"x": "item"}))
        else:
            target = f"after_{field}"
            fields[field] = target
            more.append(ChainNode(node_id=target, kind="tool", name="echo"))
    if spec.registry == "tool":
        fields["name"] = "echo"
    elif spec.registry == "skill":
        fields["name"] = "summarize"
    return [ChainNode(node_id="first", kind=spec.name, **fields), *more]


# ── every row is known everywhere ─────────────────────────────────────────────


@pytest.mark.parametrize("kind", NODE_KINDS.names)
def test_every_kind_in_the_table_validates_into_a_plan_node(kind: str) -> None:
    spec = NODE_KINDS.specs[kind]
    plan = validate(chain_for(spec), granted=NODE_KINDS.gates)
    first = plan.nodes[plan.by_id["first"]]
    assert first.kind == kind
    assert plan.roots == (plan.by_id["first"],)


def test_an_unknown_kind_is_told_the_table_names_in_order() -> None:
    found = problems_of([ChainNode(node_id="a", kind="tol", name="echo")])
    assert found == [("a", "kind", "unknown kind 'tol'; did you mean 'tool'?")]
    request = ChainRequest(nodes=[ChainNode(node_id="a", kind="tol")], entry_node="a")
    with pytest.raises(ChainInvalid) as info:
        validate_chain(request, Catalog(), SessionLimits(Limits()), granted=frozenset())
    assert info.value.details["errors"][0]["hint"] == "use one of: tool, skill, proc, branch, map"


@pytest.mark.parametrize("kind", [k for k in NODE_KINDS.names if NODE_KINDS.specs[k].gate])
def test_a_gated_kind_needs_its_gate_granted(kind: str) -> None:
    gate = NODE_KINDS.gated[kind]
    assert ("first", "kind", f"{kind} nodes need the {gate!r} capability, which this session "
            "was not granted") in problems_of(chain_for(NODE_KINDS.specs[kind]))


@pytest.mark.parametrize("kind", NODE_KINDS.names)
def test_every_field_another_kind_owns_is_refused_on_this_kind(kind: str) -> None:
    spec = NODE_KINDS.specs[kind]
    foreign: dict[str, list[str]] = {}
    for owner in NODE_KINDS.specs.values():
        for f in owner.own_fields:
            if f not in spec.own_fields:
                foreign.setdefault(f, []).append(owner.name)
    chain = chain_for(spec)
    chain[0] = ChainNode(**{**_fields(chain[0]),
                            **{f: SAMPLES.get(f, "input.x") for f in foreign}})
    found = problems_of(chain, granted=NODE_KINDS.gates)
    for field, owners in foreign.items():
        message = f"{field} is set on a {kind} node; only {one_of(owners)} nodes take it"
        assert ("first", field, message) in found


@pytest.mark.parametrize("kind", [k for k in NODE_KINDS.names if NODE_KINDS.specs[k].required])
def test_every_required_field_of_a_kind_is_required(kind: str) -> None:
    spec = NODE_KINDS.specs[kind]
    chain = chain_for(spec)
    bare = {k: v for k, v in _fields(chain[0]).items()
            if not any(k in r.fields for r in spec.required)}
    found = problems_of([ChainNode(**bare), *chain[1:]], granted=NODE_KINDS.gates)
    for required in spec.required:
        assert ("first", required.fields[0], required.message) in found


def test_gates_are_the_table_gates_and_agree_with_the_host() -> None:
    from a2e_chains import NODE_KIND_GATES

    assert kinds.gates() == ("skill", "proc")
    assert set(kinds.gates()) == set(NODE_KIND_GATES)
    assert dict(NODE_KINDS.gated) == {"skill": "skill", "proc": "proc"}


@pytest.mark.parametrize("kind", NODE_KINDS.names)
def test_every_kind_in_the_table_is_drawn_with_its_shape(kind: str) -> None:
    spec = NODE_KINDS.specs[kind]
    mermaid = {"box": '["', "rounded": '("', "parallelogram": '[/"', "diamond": '{"',
               "subroutine": '[["'}
    dot = {"box": "box", "rounded": "ellipse", "parallelogram": "parallelogram",
           "diamond": "diamond", "subroutine": "box3d"}
    chain = chain_for(spec)
    assert f"    first{mermaid[spec.shape]}first<br/>{kind}" in to_mermaid(chain)
    assert f'"first" [label="first\\n{kind}' in to_dot(chain)
    assert f"shape={dot[spec.shape]}];" in to_dot(chain).split('"first" [label=')[1]


@pytest.mark.parametrize(
    ("kind", "edge"),
    [(k, e) for k in NODE_KINDS.names for e in NODE_KINDS.specs[k].edges],
    ids=lambda v: v if isinstance(v, str) else v.field,
)
def test_every_control_edge_of_the_table_is_read_and_drawn(kind: str, edge: ControlEdge) -> None:
    chain = chain_for(NODE_KINDS.specs[kind])
    ids = {n.node_id for n in chain}
    target = getattr(chain[0], edge.field)
    if target not in ids:
        chain[0] = ChainNode(**{**_fields(chain[0]), edge.field: "target"})
        chain.append(ChainNode(node_id="target", kind="tool", name="echo"))
        target = "target"
    declared = [(d.source, d.target, d.field) for d in declared_edges(chain)
                if d.control is edge]
    assert declared == [("first", target, edge.field)]
    drawn = [(e.source, e.target, e.kind, e.label) for e in chain_edges(chain)]
    assert ("first", target, edge.style, edge.label) in drawn


def test_the_fires_column_decides_which_edges_of_a_branch_fire() -> None:
    chain = chain_for(NODE_KINDS.specs["branch"])
    chain[0] = ChainNode(**{**_fields(chain[0]), "next_node": "next"})
    chain.append(ChainNode(node_id="next", kind="tool", name="echo"))
    plan = validate(chain)
    taken = {e.field: e for e in NODE_KINDS.specs["branch"].edges if e.fires is Fires.TAKEN}
    assert set(taken) == {"true_node", "false_node"}
    state = PlanState(plan)
    state.start()
    ready, skipped = state.node_done(plan.by_id["first"], plan.by_id["after_true_node"])
    assert sorted(plan.nodes[i].node_id for i in ready) == ["after_true_node", "next"]
    assert [plan.nodes[i].node_id for i in skipped] == ["after_false_node"]
    assert state.status[plan.by_id["after_false_node"]] == NodeStatus.SKIP


def test_catalog_is_declared_once() -> None:
    assert validation.Catalog is catalog.Catalog
    assert vars(skills)["Catalog"] is catalog.Catalog  # imported, not declared again


def test_a_table_with_one_kind_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="node kind 'tool' is declared twice"):
        kinds.KindTable((kinds.TOOL, kinds.TOOL))


def test_a_kind_without_the_common_edges_is_refused() -> None:
    # validation resolves next_node and on_error on every node: a row must say so
    lonely = KindSpec("lonely", edges=(kinds.NEXT_NODE,))
    with pytest.raises(ValueError, match="'lonely' must list next_node and on_error"):
        NODE_KINDS.with_kind(lonely)


# ── a kind added to the table alone ───────────────────────────────────────────


def _seconds(node: ChainNode) -> Iterable[NodeProblem]:
    seconds = node.input.get("seconds")
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or seconds < 0:
        yield NodeProblem("input.seconds", f"wait node needs input.seconds, got {seconds!r}",
                          "set input.seconds to a number of seconds, e.g. 1.5")


WAIT = KindSpec("wait", gate="timers", checks=(_seconds,), shape="rounded")


@pytest.fixture
def with_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kinds, "NODE_KINDS", NODE_KINDS.with_kind(WAIT))


def waiting_chain(**wait: Any) -> list[ChainNode]:
    return [
        ChainNode(node_id="read", kind="tool", name="echo", next_node="pause"),
        ChainNode(node_id="pause", kind="wait", input={"seconds": 2}, next_node="write",
                  **wait),
        ChainNode(node_id="write", kind="tool", name="echo", input_map={"r": "read.output"}),
    ]


@pytest.mark.usefixtures("with_wait")
def test_a_kind_added_to_the_table_is_validated_planned_and_run_by_the_plan() -> None:
    plan = validate(waiting_chain(), granted={"timers"})
    pause = plan.nodes[plan.by_id["pause"]]
    assert (pause.kind, pause.next_index, pause.terminal) == ("wait", plan.by_id["write"], False)
    state = PlanState(plan)
    assert state.start() == [plan.by_id["read"]]
    assert state.node_done(plan.by_id["read"]) == ([plan.by_id["pause"]], [])
    assert state.node_done(plan.by_id["pause"]) == ([plan.by_id["write"]], [])
    assert kinds.gates() == ("skill", "proc", "timers")


@pytest.mark.usefixtures("with_wait")
def test_a_kind_added_to_the_table_gets_its_checks_gate_and_field_rules() -> None:
    chain = waiting_chain(condition="input.x")
    chain[1] = ChainNode(**{**_fields(chain[1]), "input": {"seconds": "soon"}})
    assert problems_of(chain) == [
        ("pause", "kind", "wait nodes need the 'timers' capability, which this session was "
                          "not granted"),
        ("pause", "input.seconds", "wait node needs input.seconds, got 'soon'"),
        ("pause", "condition", "condition is set on a wait node; only branch nodes take it"),
    ]
    found = problems_of([ChainNode(node_id="a", kind="wiat")])
    assert found == [("a", "kind", "unknown kind 'wiat'; did you mean 'wait'?")]


@pytest.mark.usefixtures("with_wait")
def test_a_kind_added_to_the_table_may_be_a_template_and_is_named_as_one() -> None:
    plan = validate([
        ChainNode(node_id="each", kind="map", items_path="input.items", map_node="pause"),
        ChainNode(node_id="pause", kind="wait", input={"seconds": 1}),
    ], granted={"timers"})
    assert plan.nodes[plan.by_id["pause"]].template_of == plan.by_id["each"]
    found = problems_of([
        ChainNode(node_id="each", kind="map", items_path="input.items", map_node="pick"),
        ChainNode(node_id="pick", kind="branch", condition="item", true_node="each"),
    ])
    assert ("each", "map_node", "map_node 'pick' is a branch node; a template must be a "
            "tool, skill, proc or wait node") in found


@pytest.mark.usefixtures("with_wait")
def test_a_kind_added_to_the_table_is_drawn_with_its_shape_and_edges() -> None:
    chain = waiting_chain()
    assert '    pause("pause<br/>wait")' in to_mermaid(chain).splitlines()
    assert '    "pause" [label="pause\\nwait", shape=ellipse];' in to_dot(chain).splitlines()
    assert [(e.source, e.target, e.kind) for e in chain_edges(chain)] == [
        ("read", "pause", "control"), ("pause", "write", "control"), ("read", "write", "data")]


# ── what graph draws: validation's reading of the declaration ────────────────


def test_declared_edges_list_control_in_table_order_then_data_by_reader() -> None:
    chain = [
        ChainNode(node_id="b", kind="branch", condition="z.output", true_node="t",
                  false_node="f", next_node="t", on_error="h"),
        ChainNode(node_id="t", kind="tool", name="echo", input_map={"x": "z.output",
                                                                     "y": "b.output"}),
        ChainNode(node_id="f", kind="map", items_path="t.output", map_node="each"),
        ChainNode(node_id="each", kind="tool", name="echo", next_node="h"),
        ChainNode(node_id="h", kind="tool", name="echo"),
        ChainNode(node_id="z", kind="tool", name="echo"),
    ]
    assert [(d.source, d.target, d.field) for d in declared_edges(chain)] == [
        ("b", "t", "next_node"), ("b", "t", "true_node"), ("b", "f", "false_node"),
        ("b", "h", "on_error"), ("f", "each", "map_node"),
        ("each", "h", "next_node"),  # a template's own edge is declared (validation refuses it)
        ("z", "b", "condition"), ("b", "t", "input_map.y"), ("z", "t", "input_map.x"),
        ("t", "f", "items_path"),
    ]


def test_a_field_the_kind_does_not_take_is_not_drawn() -> None:
    chain = [
        ChainNode(node_id="a", kind="tool", name="echo"),
        ChainNode(node_id="b", kind="tool", name="echo", condition="a.output",
                  true_node="a"),
    ]
    assert chain_edges(chain) == []


def test_an_expression_that_does_not_compile_is_not_drawn() -> None:
    chain = [
        ChainNode(node_id="a", kind="tool", name="echo"),
        ChainNode(node_id="b", kind="tool", name="echo", input_map={"x": "a.output[",
                                                                     "y": "a.output"}),
        ChainNode(node_id="c", kind="tool", name="echo", input_map={"x": "a.output["}),
    ]
    assert [(e.source, e.target, e.kind) for e in chain_edges(chain)] == [("a", "b", "data")]


def _fields(node: ChainNode) -> dict[str, Any]:
    return {f: getattr(node, f) for f in node.__struct_fields__}
