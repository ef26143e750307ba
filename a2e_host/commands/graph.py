"""``a2e-host graph CHAIN.json [--format mermaid|dot]``: a chain as a diagram.

Layer: command (reads one file, prints to stdout). The graph is the declaration's
(PROTOCOL.md §4), drawn without running anything:

* control edges solid: ``next_node``; a branch's ``true_node`` / ``false_node`` labelled
  ``true`` / ``false``; an ``on_error`` handler labelled ``on_error``;
* data edges dashed: a node id at the root of one of the node's expressions (``input_map``
  values, ``condition``, ``items_path``), found through
  :attr:`a2e_host.chains.expressions.Expression.roots` (not drawn where a control edge already
  joins the same two nodes);
* a map's template drawn inside a box (Mermaid ``subgraph``, Graphviz ``cluster``) entered
  from the map by a thick ``each item`` edge; nested maps nest.

Node labels show the id, the kind and the tool, skill or proc name. Exit codes: 0 drawn,
2 unreadable file, bad JSON, a body that is not a chain, or an unknown format.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..chains.messages import ChainNode
from .run import ChainFileError, read_chain_request

__all__ = ["Edge", "chain_edges", "graph_main", "to_dot", "to_mermaid", "FORMATS"]

FORMATS = ("mermaid", "dot")

_MERMAID_ID = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_MERMAID_RESERVED = frozenset(
    {"end", "graph", "flowchart", "subgraph", "style", "classdef", "class", "click",
     "linkstyle", "direction", "default", "call", "href"}
)
_LEADING_ID = re.compile(r"^\s*(?:\$\.)?([A-Za-z_][A-Za-z0-9_]*)")


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
    """Every edge of the declaration, in node order, without duplicates.

    Edges to ids that are not declared are left out (validation reports them); a data
    edge that parallels a control edge between the same two nodes is not listed twice.
    """
    nodes = list(nodes)
    ids = {n.node_id for n in nodes}
    edges: list[Edge] = []
    seen: set[Edge] = set()

    def add(edge: Edge) -> None:
        if edge.target in ids and edge.source in ids and edge not in seen:
            seen.add(edge)
            edges.append(edge)

    for node in nodes:
        if node.next_node:
            add(Edge(node.node_id, node.next_node, "control"))
        if node.kind == "branch":
            if node.true_node:
                add(Edge(node.node_id, node.true_node, "control", "true"))
            if node.false_node:
                add(Edge(node.node_id, node.false_node, "control", "false"))
        if node.on_error not in ("", "abort", "skip"):
            add(Edge(node.node_id, node.on_error, "control", "on_error"))
        if node.kind == "map" and node.map_node:
            add(Edge(node.node_id, node.map_node, "map", "each item"))
    ordered = {(e.source, e.target) for e in edges}
    for node in nodes:
        for root in sorted(_expression_roots(node) & ids - {node.node_id}):
            if (root, node.node_id) not in ordered:
                add(Edge(root, node.node_id, "data"))
    return edges


def _expression_roots(node: ChainNode) -> set[str]:
    texts = [*node.input_map.values(), node.condition, node.items_path]
    roots: set[str] = set()
    for text in texts:
        if text:
            roots |= _roots_of(text)
    return roots


def _roots_of(text: str) -> set[str]:
    try:
        from ..chains.expressions import compile_expression
    except ImportError:  # pragma: no cover - only before the expressions module exists
        match = _LEADING_ID.match(text)
        return {match.group(1)} if match else set()
    try:
        return set(compile_expression(text).roots)
    except ValueError:  # a syntax error: validation reports it; draw what can be read
        match = _LEADING_ID.match(text)
        return {match.group(1)} if match else set()


def _templates(nodes: list[ChainNode]) -> dict[str, str]:
    """template id → map id, for the maps whose template is declared."""
    ids = {n.node_id for n in nodes}
    return {n.map_node: n.node_id for n in nodes if n.kind == "map" and n.map_node in ids}


def _label(node: ChainNode) -> str:
    name = f" {node.name}" if node.name else ""
    return f"{node.node_id}\n{node.kind}{name}"


# ── Mermaid ─────────────────────────────────────────────────────────────────


def to_mermaid(nodes: Iterable[ChainNode]) -> str:
    """The chain as a Mermaid ``flowchart TD`` (one node declaration per node id).

    Branches are rhombi, maps subroutine boxes, templates sit in a ``subgraph`` named
    after their map. Node ids that Mermaid cannot take as written (``end``, hyphens,
    dots, a leading digit) are replaced by ``n_…`` ids; the label keeps the real id.
    """
    nodes = list(nodes)
    ids = _mermaid_ids([n.node_id for n in nodes])
    by_id = {n.node_id: n for n in nodes}
    templates = _templates(nodes)
    lines = ["flowchart TD"]

    def declare(node: ChainNode, indent: str) -> None:
        lines.append(indent + _mermaid_node(ids[node.node_id], node))

    def declare_with_template(node: ChainNode, indent: str) -> None:
        declare(node, indent)
        if node.kind == "map" and node.map_node in by_id and templates.get(node.map_node) == (
            node.node_id
        ):
            template = by_id[node.map_node]
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
    for edge in chain_edges(nodes):
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
    return "\n".join(lines)


def _mermaid_ids(node_ids: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    used: set[str] = set()
    for node_id in node_ids:
        if node_id in out:
            continue
        if _MERMAID_ID.match(node_id) and node_id.lower() not in _MERMAID_RESERVED:
            candidate = node_id
        else:
            candidate = "n_" + re.sub(r"[^A-Za-z0-9_]", "_", node_id)
        base, n = candidate, 2
        while candidate in used or candidate in node_ids and candidate != node_id:
            candidate = f"{base}_{n}"
            n += 1
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


def _mermaid_node(mid: str, node: ChainNode) -> str:
    text = _mermaid_text(_label(node))
    if node.kind == "branch":
        return f'{mid}{{"{text}"}}'
    if node.kind == "map":
        return f'{mid}[["{text}"]]'
    if node.kind == "proc":
        return f'{mid}[/"{text}"/]'
    if node.kind == "skill":
        return f'{mid}("{text}")'
    return f'{mid}["{text}"]'


# ── Graphviz ────────────────────────────────────────────────────────────────


def to_dot(nodes: Iterable[ChainNode]) -> str:
    """The chain as a Graphviz ``digraph`` (templates in ``cluster_`` subgraphs)."""
    nodes = list(nodes)
    by_id = {n.node_id: n for n in nodes}
    templates = _templates(nodes)
    shapes = {"branch": "diamond", "map": "box3d", "proc": "parallelogram", "skill": "ellipse"}
    lines = ["digraph chain {", "    rankdir=TB;", "    node [shape=box];"]

    def declare(node: ChainNode, indent: str) -> None:
        shape = shapes.get(node.kind, "box")
        lines.append(f"{indent}{_dot_id(node.node_id)} [label={_dot_str(_label(node))}, "
                     f"shape={shape}];")
        if node.kind == "map" and node.map_node in by_id and templates.get(node.map_node) == (
            node.node_id
        ):
            lines.append(f"{indent}subgraph {_dot_id('cluster_' + node.node_id)} {{")
            lines.append(f"{indent}    label={_dot_str('for each item of ' + node.node_id)};")
            lines.append(f"{indent}    style=dashed;")
            declare(by_id[node.map_node], indent + "    ")
            lines.append(f"{indent}}}")

    for node in nodes:
        if node.node_id not in templates:
            declare(node, "    ")
    for edge in chain_edges(nodes):
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

