"""What each node kind means, in one table (PROTOCOL.md §4, §5, §8).

Layer: core (pure data, no I/O, no anyio). Validation, the plan, graph drawing and
capability listing read this table; none of them keeps a list of kinds of its own.

Theory of operation. A node kind is one :class:`KindSpec` row:

=========  ====================  ========  =====================================  ========
kind       own fields            gate      control edges                          executed
=========  ====================  ========  =====================================  ========
tool       retry, timeout,       –         next_node, on_error                    yes
           fallback, cache
skill      timeout               skill     next_node, on_error                    yes
proc       retry, timeout        proc      next_node, on_error                    yes
branch     condition,            –         next_node, true_node, false_node,      no
           true_node, false_node           on_error
map        items_path, map_node  –         next_node, on_error, map_node          no
=========  ====================  ========  =====================================  ========

*Own fields* are fields only that kind may set (another kind setting one is a problem).
The recovery fields (PROTOCOL.md §5 Recovery) belong to the kinds that call something:
``retry`` to tool and proc nodes (a skill's sub-chain run again would repeat its inner
nodes' events), ``timeout`` to every executed kind, ``fallback`` and ``cache`` to tool
nodes (they name or key a tool).
A *gate* is a name in ``handshake/req agent_caps`` that unlocks the kind (PROTOCOL.md §8).
An *executed* kind is run by an executor (the scheduler's ``executors[kind]``) and may be a
map's template; a *control* kind (branch, map) is run by the scheduler itself.

A :class:`ControlEdge` says which node field names a successor and how that edge behaves:
its :class:`EdgeKind` bit in the plan (``map_node`` has none: a template is run by its
map, not reached by an edge), when it *fires* (:class:`Fires`, read by
:class:`~a2e_host.chains.plan.PlanState`), and how ``a2e-host graph`` draws it.

Readers look the table up as ``kinds.NODE_KINDS`` when they run, never bind it at import,
so a table with one more kind (``NODE_KINDS.with_kind(spec)``) can be put in its place.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

from .messages import ChainNode

__all__ = [
    "BRANCH",
    "LISTING_MESSAGE",
    "COMMON_EDGES",
    "FALSE_NODE",
    "MAP",
    "MAP_NODE",
    "NEXT_NODE",
    "NODE_KINDS",
    "ON_ERROR",
    "PROC",
    "SKILL",
    "TOOL",
    "TRUE_NODE",
    "ControlEdge",
    "EdgeKind",
    "Fires",
    "KindCheck",
    "KindRow",
    "KindSpec",
    "KindTable",
    "NodeProblem",
    "Required",
    "gates",
    "one_of",
]


class EdgeKind(enum.IntFlag):
    """Why one node follows another in a plan; several kinds between one pair are OR-ed."""

    NEXT = 1
    TRUE = 2
    FALSE = 4
    HANDLER = 8
    DATA = 16


class Fires(enum.Enum):
    """When a control edge fires (PROTOCOL.md §4 readiness, §5 errors)."""

    FINISHED = "finished"
    """When its node is done, or failed under ``on_error: skip``."""
    TAKEN = "taken"
    """When its node is done and took this edge's side (a branch's ``true_node`` /
    ``false_node``)."""
    HANDLED = "handled"
    """When its node failed under an ``on_error`` handler (the edge to that handler)."""
    NEVER = "never"
    """Not an edge of the plan (``map_node``: the template runs per item of its map)."""


@dataclass(frozen=True, slots=True)
class ControlEdge:
    """One node field that names another node of the chain.

    Attributes:
        field: the :class:`~a2e_host.chains.messages.ChainNode` field holding the target id.
        edge: the plan's :class:`EdgeKind` bit, None when it is not a plan edge.
        fires: when the edge fires (:class:`Fires`).
        style: how ``a2e-host graph`` draws it: ``control`` (solid) or ``map`` (thick,
            into the template's box).
        label: the drawn label (``""`` for none).
        keywords: values of the field that name no node (``""`` means absent; ``on_error``
            also takes ``abort`` and ``skip``).
    """

    field: str
    edge: EdgeKind | None
    fires: Fires
    style: str = "control"
    label: str = ""
    keywords: tuple[str, ...] = ("",)


NEXT_NODE = ControlEdge("next_node", EdgeKind.NEXT, Fires.FINISHED)
TRUE_NODE = ControlEdge("true_node", EdgeKind.TRUE, Fires.TAKEN, label="true")
FALSE_NODE = ControlEdge("false_node", EdgeKind.FALSE, Fires.TAKEN, label="false")
ON_ERROR = ControlEdge("on_error", EdgeKind.HANDLER, Fires.HANDLED, label="on_error",
                       keywords=("", "abort", "skip"))
MAP_NODE = ControlEdge("map_node", None, Fires.NEVER, style="map", label="each item")

COMMON_EDGES: tuple[ControlEdge, ...] = (NEXT_NODE, ON_ERROR)
"""The control edges every node may declare, also one of an unknown kind."""


@dataclass(frozen=True, slots=True)
class Required:
    """A field (or one of several) a kind cannot do without.

    Attributes:
        fields: at least one of these must be set (non-empty); the problem names the first.
        message / hint: the problem's text (PROTOCOL.md §4 problem shape).
    """

    fields: tuple[str, ...]
    message: str
    hint: str


class NodeProblem(NamedTuple):
    """A problem a per-kind check finds in one node: the field, what is wrong, the fix."""

    field: str
    message: str
    hint: str


KindCheck = Callable[[ChainNode], Iterable[NodeProblem]]
"""A pure per-kind check: the node in, its problems out (none when it is fine)."""


@dataclass(frozen=True, slots=True)
class KindSpec:
    """One node kind: everything the host knows about it before anything runs.

    Attributes:
        name: the ``kind`` value (PROTOCOL.md §5).
        own_fields: fields only this kind may set.
        required: fields it cannot do without, checked in this order.
        gate: the ``agent_caps`` name that must be granted to the session, None when the
            ``chains`` capability alone unlocks it (PROTOCOL.md §8).
        edges: the control edges it may declare, in the order validation reads them and
            ``a2e-host graph`` draws them (``next_node`` and ``on_error`` for every kind).
        executed: run by an executor (and so fit to be a map's template), else a control
            kind run by the scheduler itself.
        registry: ``"tool"`` or ``"skill"`` when ``name`` must name one the host
            registered, else None.
        proc_policy: whether the host's proc policy is asked about the node before it runs.
        expressions: its own fields holding a JMESPath expression (besides ``input_map``),
            compiled by validation.
        checks: further pure checks, run after the ones above.
        subchains: its executor runs declared sub-chains inside the current run (it gets
            ``NodeContext.run_subchain``, and its declared skills count towards
            ``max_total_nodes`` before the chain runs).
        unknown_effects: what a call does is unknown to the host (a process): a node's
            ``retry`` repeats it only for codes its ``retry_on`` names, as for a tool
            that writes without being idempotent (PROTOCOL.md §5 Recovery).
        output: the JSON Schema of the output the host itself builds for this kind (a
            branch's ``{condition, taken}``, a proc's result), read by the static checks
            (:mod:`~a2e_host.chains.typecheck`); None when the tool or skill named declares
            it, or a map's list of its template's outputs.
        shape: how ``a2e-host graph`` draws the node: ``box``, ``rounded``,
            ``parallelogram``, ``diamond`` or ``subroutine``.
        on_resume: what a durable run resumed after a restart does with a node of this
            kind that was running (PROTOCOL.md §5 Resume), besides running it again when
            it sets ``resume: "rerun"``: ``"rerun"`` runs it again (pure, or restored
            piece by piece: a branch, a map); ``"idempotent"`` when its tool is declared
            idempotent; ``"subchain"`` when it names a declarative skill (whose inner
            nodes are restored one by one); ``"interrupt"`` never (an ``interrupted``
            error).
    """

    name: str
    own_fields: tuple[str, ...] = ()
    required: tuple[Required, ...] = ()
    gate: str | None = None
    edges: tuple[ControlEdge, ...] = COMMON_EDGES
    executed: bool = True
    registry: str | None = None
    proc_policy: bool = False
    expressions: tuple[str, ...] = ()
    checks: tuple[KindCheck, ...] = ()
    subchains: bool = False
    unknown_effects: bool = False
    output: Mapping[str, Any] | None = None
    shape: str = "box"
    on_resume: str = "interrupt"


def _named(what: str) -> Required:
    return Required(("name",), f"{what} node has no name",
                    f"set 'name' to a registered {what} ({LISTING_MESSAGE[what]} lists them)")


LISTING_MESSAGE = {"tool": "tool/list/req", "skill": "skill/discover/req"}
"""The message that lists what a kind's ``name`` may be (PROTOCOL.md §9, §11)."""


TOOL = KindSpec("tool", own_fields=("retry", "timeout", "fallback", "cache", "resume"),
                required=(_named("tool"),), registry="tool", on_resume="idempotent")
SKILL = KindSpec("skill", own_fields=("timeout", "resume"), required=(_named("skill"),),
                 gate="skill", registry="skill", subchains=True, shape="rounded",
                 on_resume="subchain")


def _closed_object(**fields: str) -> Mapping[str, Any]:
    """The JSON Schema of an object with exactly these fields, each of this type."""
    return MappingProxyType({"type": "object", "additionalProperties": False,
                             "properties": {k: {"type": t} for k, t in fields.items()},
                             "required": list(fields)})


PROC = KindSpec("proc", own_fields=("retry", "timeout", "resume"), gate="proc", proc_policy=True,
                unknown_effects=True, shape="parallelogram",
                output=_closed_object(exit_code="integer", stdout="string", stderr="string",
                                      duration_ms="integer", truncated="boolean"))
BRANCH = KindSpec(
    "branch",
    own_fields=("condition", "true_node", "false_node"),
    required=(
        Required(("condition",), "branch node has no condition",
                 "set 'condition' to a JMESPath expression, e.g. "
                 "\"length(input.items) > `0`\""),
        Required(("true_node", "false_node"), "branch node has neither true_node nor "
                 "false_node", "set true_node, false_node or both"),
    ),
    edges=(NEXT_NODE, TRUE_NODE, FALSE_NODE, ON_ERROR),
    executed=False,
    expressions=("condition",),
    output=_closed_object(condition="boolean", taken="string"),
    shape="diamond",
    on_resume="rerun",
)
MAP = KindSpec(
    "map",
    own_fields=("items_path", "map_node"),
    required=(
        Required(("items_path",), "map node has no items_path",
                 "set 'items_path' to a JMESPath expression giving a list, "
                 "e.g. \"input.files\""),
        Required(("map_node",), "map node has no map_node",
                 "set 'map_node' to the node_id to run once per item"),
    ),
    edges=(NEXT_NODE, ON_ERROR, MAP_NODE),
    executed=False,
    expressions=("items_path",),
    shape="subroutine",
    on_resume="rerun",
)


def _bits(specs: Iterable[KindSpec], fires: Iterable[Fires]) -> int:
    wanted = set(fires)
    bits = 0
    for spec in specs:
        for edge in spec.edges:
            if edge.edge is not None and edge.fires in wanted:
                bits |= int(edge.edge)
    return bits


@dataclass(frozen=True, slots=True)
class KindRow:
    """A kind's spec with the facts that depend on the whole table, worked out once.

    Attributes:
        spec: the kind's :class:`KindSpec`.
        own_edges: its control edges that are not :data:`COMMON_EDGES`, in table order.
        foreign_fields: ``(field, owners)`` for each field a node of this kind may not set,
            ``owners`` naming the kinds that take it (``"branch"``, or ``"branch or map"``).
        plan_edges: ``(field, bit)`` for each of its edges that is a plan edge, in order,
            ``bit`` the :class:`EdgeKind` value as a plain int.
    """

    spec: KindSpec
    own_edges: tuple[ControlEdge, ...]
    foreign_fields: tuple[tuple[str, str], ...]
    plan_edges: tuple[tuple[str, int], ...]


def _plan_edges(edges: Iterable[ControlEdge]) -> tuple[tuple[str, int], ...]:
    return tuple((e.field, int(e.edge)) for e in edges if e.edge is not None)


class KindTable:
    """The node kinds one host knows, with the facts derived from them once.

    Args:
        specs: one :class:`KindSpec` per kind, in the order problems list them.

    Raises:
        ValueError: two specs with one name, a spec whose edges leave out one of
            :data:`COMMON_EDGES`, or a :class:`Required` naming no field.

    Attributes:
        specs: kind name → spec, in table order.
        rows: kind name → :class:`KindRow`, in table order (what validation reads per node).
        names: the kind names, in table order.
        gates: the distinct gates, in table order (``("skill", "proc")``).
        gated: kind → its gate, for the kinds that have one.
        edge_fields: every field any kind reads as a control edge, in first-seen order.
        common_plan_edges: ``(field, bit)`` of :data:`COMMON_EDGES` (an unknown kind's).
        template_kinds: the executed kinds (those a map may run per item).
        subchain_kinds: the kinds whose executor runs sub-chains (``skill``).
        finished_bits / taken_bits / handled_bits: the plan edge bits that fire when a node
            finishes (done or skipped after a failure), takes a side, or is handled.
        activating_bits: the edge bits that activate a node (everything but a handler);
            the activator is the context's ``output`` (PROTOCOL.md §3).
        control_bits: every plan control edge bit.

    The mappings are plain dicts, read in hot loops: build another table rather than
    change one.
    """

    __slots__ = ("specs", "rows", "names", "gates", "gated", "edge_fields",
                 "common_plan_edges", "template_kinds", "subchain_kinds", "finished_bits",
                 "taken_bits", "handled_bits", "activating_bits", "control_bits")

    def __init__(self, specs: Iterable[KindSpec]) -> None:
        by_name: dict[str, KindSpec] = {}
        for spec in specs:
            if spec.name in by_name:
                raise ValueError(f"node kind {spec.name!r} is declared twice")
            if not all(edge in spec.edges for edge in COMMON_EDGES):
                raise ValueError(f"node kind {spec.name!r} must list next_node and on_error "
                                 "among its edges (every node may declare them)")
            if not all(required.fields for required in spec.required):
                raise ValueError(f"node kind {spec.name!r} requires a field but names none")
            by_name[spec.name] = spec
        values = by_name.values()
        self.specs: Mapping[str, KindSpec] = by_name
        self.names = tuple(by_name)
        self.gated: Mapping[str, str] = MappingProxyType(
            {s.name: s.gate for s in values if s.gate is not None})
        self.gates = tuple(dict.fromkeys(self.gated.values()))
        fields = {e.field: None for spec in values for e in (*COMMON_EDGES, *spec.edges)}
        self.edge_fields = tuple(fields)
        self.common_plan_edges = _plan_edges(COMMON_EDGES)
        self.template_kinds = tuple(spec.name for spec in values if spec.executed)
        self.subchain_kinds = frozenset(spec.name for spec in values if spec.subchains)
        self.finished_bits = _bits(values, (Fires.FINISHED,))
        self.taken_bits = _bits(values, (Fires.TAKEN,))
        self.handled_bits = _bits(values, (Fires.HANDLED,))
        self.activating_bits = _bits(values, (Fires.FINISHED, Fires.TAKEN))
        self.control_bits = _bits(values, (Fires.FINISHED, Fires.TAKEN, Fires.HANDLED))
        owners: dict[str, list[str]] = {}
        for spec in values:
            for field in spec.own_fields:
                owners.setdefault(field, []).append(spec.name)
        self.rows: Mapping[str, KindRow] = {
            spec.name: KindRow(
                spec=spec,
                own_edges=tuple(e for e in spec.edges if e not in COMMON_EDGES),
                foreign_fields=tuple((field, one_of(names)) for field, names in owners.items()
                                     if spec.name not in names),
                plan_edges=_plan_edges(spec.edges),
            )
            for spec in values
        }

    def get(self, kind: str) -> KindSpec | None:
        """The spec of ``kind``, None when the host knows no such kind."""
        return self.specs.get(kind)

    def edges_of(self, kind: str) -> tuple[ControlEdge, ...]:
        """The control edges a node of ``kind`` declares (:data:`COMMON_EDGES` for an
        unknown kind, whose other fields mean nothing)."""
        spec = self.specs.get(kind)
        return COMMON_EDGES if spec is None else spec.edges

    def with_kind(self, spec: KindSpec) -> KindTable:
        """This table with ``spec`` added last (or in place of the kind of its name)."""
        specs = dict(self.specs)
        specs[spec.name] = spec
        return KindTable(specs.values())


def one_of(names: Iterable[str]) -> str:
    """``"tool, skill or proc"``: names for a sentence (``"map"`` for one)."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


NODE_KINDS = KindTable((TOOL, SKILL, PROC, BRANCH, MAP))
"""The node kinds of PROTOCOL.md §5. Read it as ``kinds.NODE_KINDS`` at call time."""


def gates() -> tuple[str, ...]:
    """The names in ``agent_caps`` that unlock node kinds, in table order:
    ``("skill", "proc")`` (PROTOCOL.md §8). Which of them a host offers is its own
    decision (``proc`` only when an executable is allowed)."""
    return NODE_KINDS.gates
