"""``a2e-host graph CHAIN.json [--format mermaid|dot]``: a chain as a diagram.

Layer: command (reads one file, prints to stdout). The graph is the declaration's
(PROTOCOL.md §4), drawn without running anything, from the edges validation reads
(:func:`a2e_host.chains.validation.declared_edges`) and the kind table's drawing columns
(:data:`a2e_host.chains.kinds.NODE_KINDS`):

* control edges solid: ``next_node``; a branch's ``true_node`` / ``false_node`` labelled
  ``true`` / ``false``; an ``on_error`` handler labelled ``on_error``;
* data edges dashed: a node id at the root of one of the node's expressions (``input_map``
  values, and its kind's own expression fields: ``condition``, ``items_path``), not drawn
  where a control edge already joins the same two nodes, nor from a node to itself;
* a map's template drawn inside a box (Mermaid ``subgraph``, Graphviz ``cluster``) entered
  from the map by a thick ``each item`` edge; nested maps nest.

A reference validation does not read (to an undeclared id, in a field the node's kind does
not take, in an expression that does not compile, of a second declaration of one id) is
not drawn.

Node labels show the id, the kind and the tool, skill or proc name. Exit codes: 0 drawn,
2 unreadable file, bad JSON, a body that is not a chain, or an unknown format.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ..chains import kinds
from ..chains.messages import ChainNode
from ..chains.validation import declared_edges
from .run import ChainFileError, read_chain_request
from .run_outcomes import NodeOutcome
from .run_trace import format_ms

__all__ = ["Edge", "chain_edges", "graph_main", "item_counts", "node_outcome", "to_dot",
           "to_mermaid", "DASHED_OUTCOMES", "FORMATS", "NEVER_STARTED", "OUTCOME_FILLS",
           "OUTCOME_STROKES", "OUTCOME_STYLES"]

FORMATS = ("mermaid", "dot")

_MERMAID_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_MERMAID_RESERVED = frozenset(
    {"end", "graph", "flowchart", "subgraph", "style", "classdef", "class", "click",
     "linkstyle", "direction", "default", "call", "href"}
)
# a kind's shape (kinds.KindSpec.shape) as a Mermaid node (around the quoted label) and
# as a Graphviz shape; an unknown kind is drawn as a box
_MERMAID_SHAPES = {"box": ("[", "]"), "rounded": ("(", ")"), "parallelogram": ("[/", "/]"),
                   "diamond": ("{", "}"), "subroutine": ("[[", "]]")}
NEVER_STARTED = "never_started"
"""The class of a node a run has no event of: not reached, or cancelled before it started
(while the run goes on: not started so far)."""
OUTCOME_FILLS = {"done": "#d3f9d8", "error": "#ffc9c9", "skipped": "#e9ecef",
                 "running": "#d0ebff", "interrupted": "#ffec99", NEVER_STARTED: "#ffffff"}
"""Fill colour of each outcome (:data:`~a2e_host.commands.run_outcomes.OUTCOMES`, then
:data:`NEVER_STARTED`)."""
OUTCOME_STROKES = {"done": "#2b8a3e", "error": "#c92a2a", "skipped": "#868e96",
                   "running": "#1864ab", "interrupted": "#e67700", NEVER_STARTED: "#adb5bd"}
"""Border colour of each outcome."""
DASHED_OUTCOMES = frozenset({"skipped", "interrupted", NEVER_STARTED})
"""The outcomes drawn with a dashed border."""
OUTCOME_STYLES = {
    name: f"fill:{fill},stroke:{OUTCOME_STROKES[name]}"
    + (",stroke-dasharray:4 3" if name in DASHED_OUTCOMES else "")
    for name, fill in OUTCOME_FILLS.items()
}
"""Each outcome's Mermaid ``classDef`` style, in the order the drawing declares them."""
_DOT_SHAPES = {"box": "box", "rounded": "ellipse", "parallelogram": "parallelogram",
               "diamond": "diamond", "subroutine": "box3d"}


def graph_main(chain: Path, format: str) -> int:
    """Print the chain file ``chain`` as a diagram.

    Args:
        chain: a JSON file holding a ``chain/req`` body.
        format: ``mermaid`` (a ``flowchart TD``) or ``dot`` (a Graphviz ``digraph``).

    Returns:
        0 when printed; 2 for an unreadable or malformed file or an unknown format (one
        line on stderr says which and how to fix it).
    """
    if format not in FORMATS:
        print(
            f"a2e-host graph: unknown --format {format!r}; use one of: {', '.join(FORMATS)}",
            file=sys.stderr,
        )
        return 2
    try:
        request = read_chain_request(chain)
    except ChainFileError as exc:
        print(f"a2e-host graph: {exc}", file=sys.stderr)
        return 2
    print(to_mermaid(request.nodes) if format == "mermaid" else to_dot(request.nodes))
    return 0


@dataclass(frozen=True, slots=True)
class Edge:
    """One edge of the drawing.

    Attributes:
        source / target: node ids.
        kind: ``control``, ``data`` or ``map`` (map → its template).
        label: ``true``, ``false``, ``on_error``, ``each item`` or ``""``.
    """

    source: str
    target: str
    kind: str
    label: str = ""


def chain_edges(nodes: Iterable[ChainNode]) -> list[Edge]:
    """Every edge of the drawing: control and map edges in node order, then data edges.

    The edges are validation's (:func:`~a2e_host.chains.validation.declared_edges`); a
    data edge that parallels a control edge between the same two nodes, or joins a node
    to itself, is not listed.
    """
    edges: list[Edge] = []
    joined: set[tuple[str, str]] = set()
    for declared in declared_edges(nodes):
        control = declared.control
        if control is not None:
            edges.append(Edge(declared.source, declared.target, control.style, control.label))
            joined.add((declared.source, declared.target))
        elif declared.source != declared.target and (
                (declared.source, declared.target) not in joined):
            edges.append(Edge(declared.source, declared.target, "data"))
    return edges


def _templates(edges: list[Edge]) -> dict[str, str]:
    """template id → map id, for the maps whose template is declared (the last map wins)."""
    return {e.target: e.source for e in edges if e.kind == "map"}


def _shape(node: ChainNode) -> str:
    spec = kinds.NODE_KINDS.get(node.kind)
    return spec.shape if spec is not None else "box"


def node_outcome(node_id: str, outcomes: Mapping[str, NodeOutcome]) -> str:
    """The class a run gives ``node_id``: its outcome, else :data:`NEVER_STARTED`."""
    outcome = outcomes.get(node_id)
    return outcome.outcome if outcome is not None else NEVER_STARTED


def item_counts(outcome: NodeOutcome) -> str:
    """A template's items by outcome: ``12 done · 1 error`` (``""`` for no items)."""
    return " · ".join(f"{outcome.items[k]:,} {k}" for k in OUTCOME_STYLES
                      if outcome.items[k])


def _label(node: ChainNode, outcomes: Mapping[str, NodeOutcome] | None = None) -> str:
    name = f" {node.name}" if node.name else ""
    label = f"{node.node_id}\n{node.kind}{name}"
    outcome = outcomes.get(node.node_id) if outcomes else None
    if outcome is not None and outcome.items:
        label += f"\nitems: {item_counts(outcome)}"
    if outcome is not None and outcome.duration_ms is not None:
        label += f"\n{outcome.outcome} in {format_ms(outcome.duration_ms)}"
    return label


# ── Mermaid ─────────────────────────────────────────────────────────────────


def to_mermaid(
    nodes: Iterable[ChainNode], outcomes: Mapping[str, NodeOutcome] | None = None
) -> str:
    """The chain as a Mermaid ``flowchart TD`` (one node declaration per node id).

    Branches are rhombi, maps subroutine boxes, templates sit in a ``subgraph`` named
    after their map. Node ids that Mermaid cannot take as written (``end``, hyphens,
    dots, a leading digit) are replaced by ``n_…`` ids; the label keeps the real id.

    Args:
        nodes: the chain's nodes.
        outcomes: a run's outcome per node id (:mod:`~a2e_host.commands.run_outcomes`),
            or None to draw the declaration alone. Given, the drawing ends with a
            ``classDef`` per outcome (:data:`OUTCOME_STYLES`) and a ``class`` line per
            outcome listing its nodes (:data:`NEVER_STARTED` those without an event); a
            map template's label adds its items' counts, and a node's label its
            duration where the run's times were folded (``done in 12 ms``).
    """
    nodes = list(nodes)
    edges = chain_edges(nodes)
    ids = _mermaid_ids([n.node_id for n in nodes])
    by_id = {n.node_id: n for n in nodes}
    templates = _templates(edges)
    boxes = {map_id: template_id for template_id, map_id in templates.items()}
    lines = ["flowchart TD"]

    def declare(node: ChainNode, indent: str) -> None:
        lines.append(indent + _mermaid_node(ids[node.node_id], node, outcomes))

    def declare_with_template(node: ChainNode, indent: str) -> None:
        declare(node, indent)
        if node.node_id in boxes:
            template = by_id[boxes[node.node_id]]
            box = ids[node.node_id] + "__each"
            title = _mermaid_text(f"for each item of {node.node_id}")
            lines.append(f'{indent}subgraph {box}["{title}"]')
            declare_with_template(template, indent + "    ")
            lines.append(f"{indent}end")

    for node in nodes:
        if node.node_id in templates:
            continue  # drawn inside its map's subgraph
        declare_with_template(node, "    ")
    styles = {"control": "-->", "data": "-.->", "map": "==>"}
    for edge in edges:
        arrow = styles[edge.kind]
        src, dst = ids[edge.source], ids[edge.target]
        if edge.label:
            text = _mermaid_text(edge.label)
            if edge.kind == "data":
                lines.append(f"    {src} -. {text} .-> {dst}")
            elif edge.kind == "map":
                lines.append(f"    {src} ==>|{text}| {dst}")
            else:
                lines.append(f"    {src} -->|{text}| {dst}")
        else:
            lines.append(f"    {src} {arrow} {dst}")
    if outcomes is not None:
        lines.extend(f"    classDef {name} {style}" for name, style in OUTCOME_STYLES.items())
        for name in OUTCOME_STYLES:
            members = [ids[n.node_id] for n in nodes
                       if node_outcome(n.node_id, outcomes) == name]
            if members:
                lines.append(f"    class {','.join(members)} {name}")
    return "\n".join(lines)


def _mermaid_ids(node_ids: list[str]) -> dict[str, str]:
    """node id → a Mermaid id: itself where Mermaid takes it, else ``n_…`` made unique
    with ``_2``, ``_3`` … (linear in the ids, however many share one ``n_…`` form)."""
    out: dict[str, str] = {}
    taken: set[str] = set(node_ids)  # a real id is never given to another node
    used: set[str] = set()
    next_suffix: dict[str, int] = {}
    for node_id in node_ids:
        if node_id in out:
            continue
        if _MERMAID_ID.match(node_id) and node_id.lower() not in _MERMAID_RESERVED:
            candidate = node_id
        else:
            candidate = "n_" + re.sub(r"[^A-Za-z0-9_]", "_", node_id)
        base = candidate
        n = next_suffix.get(base, 2)
        while candidate in used or candidate in taken and candidate != node_id:
            candidate = f"{base}_{n}"
            n += 1
        next_suffix[base] = n
        used.add(candidate)
        out[node_id] = candidate
    return out


def _mermaid_text(text: str) -> str:
    """Text safe inside a quoted Mermaid label (entity codes for quotes and brackets)."""
    out = (
        text.replace("&", "#amp;")
        .replace('"', "#quot;")
        .replace("<", "#lt;")
        .replace(">", "#gt;")
        .replace("|", "#124;")
    )
    return out.replace("\n", "<br/>")


def _mermaid_node(
    mid: str, node: ChainNode, outcomes: Mapping[str, NodeOutcome] | None = None
) -> str:
    opening, closing = _MERMAID_SHAPES[_shape(node)]
    return f'{mid}{opening}"{_mermaid_text(_label(node, outcomes))}"{closing}'


# ── Graphviz ────────────────────────────────────────────────────────────────


def to_dot(
    nodes: Iterable[ChainNode], outcomes: Mapping[str, NodeOutcome] | None = None
) -> str:
    """The chain as a Graphviz ``digraph`` (templates in ``cluster_`` subgraphs).

    Args:
        nodes: the chain's nodes.
        outcomes: as for :func:`to_mermaid`; each node is filled with its outcome's
            colours (``style=filled``, dashed as :data:`DASHED_OUTCOMES`;
            :data:`NEVER_STARTED` for a node without an event), and a label adds a
            template's items' counts and the node's duration.
    """
    nodes = list(nodes)
    edges = chain_edges(nodes)
    by_id = {n.node_id: n for n in nodes}
    templates = _templates(edges)
    boxes = {map_id: template_id for template_id, map_id in templates.items()}
    lines = ["digraph chain {", "    rankdir=TB;", "    node [shape=box];"]

    def declare(node: ChainNode, indent: str) -> None:
        shape = _DOT_SHAPES[_shape(node)]
        fill = ""
        if outcomes is not None:
            state = node_outcome(node.node_id, outcomes)
            fill = (f", style=\"filled{',dashed' if state in DASHED_OUTCOMES else ''}\", "
                    f"color={_dot_str(OUTCOME_STROKES[state])}, "
                    f"fillcolor={_dot_str(OUTCOME_FILLS[state])}")
        lines.append(f"{indent}{_dot_id(node.node_id)} "
                     f"[label={_dot_str(_label(node, outcomes))}, shape={shape}{fill}];")
        if node.node_id in boxes:
            lines.append(f"{indent}subgraph {_dot_id('cluster_' + node.node_id)} {{")
            lines.append(f"{indent}    label={_dot_str('for each item of ' + node.node_id)};")
            lines.append(f"{indent}    style=dashed;")
            declare(by_id[boxes[node.node_id]], indent + "    ")
            lines.append(f"{indent}}}")

    for node in nodes:
        if node.node_id not in templates:
            declare(node, "    ")
    for edge in edges:
        attrs = []
        if edge.kind == "data":
            attrs.append("style=dashed")
        elif edge.kind == "map":
            attrs.append("style=bold")
        if edge.label:
            attrs.append(f"label={_dot_str(edge.label)}")
        suffix = f" [{', '.join(attrs)}]" if attrs else ""
        lines.append(f"    {_dot_id(edge.source)} -> {_dot_id(edge.target)}{suffix};")
    lines.append("}")
    return "\n".join(lines)


def _dot_str(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def _dot_id(node_id: str) -> str:
    return _dot_str(node_id)

