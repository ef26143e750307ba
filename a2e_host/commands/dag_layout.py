"""A layered drawing of a DAG: each node's layer (top to bottom) and place in its layer.

Layer: command support (pure: no I/O). The HTML run view (:mod:`~a2e_host.commands.run_page`)
draws a chain with it as inline SVG, so the page needs no script and fetches nothing.

The layout is the classic one, kept simple: a node's layer is the length of the longest
path reaching it (Kahn's algorithm; nodes on a cycle, which validation refuses but a
recorded run's chain file may still hold, go one layer below the deepest node they follow);
within a layer nodes keep declaration order, then two downward sweeps sort each layer by
the mean place of its nodes' predecessors (fewer crossings). Time and memory are linear
in nodes + edges (the sort: n log n).
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["Layout", "layered_layout"]


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each node goes.

    Attributes:
        layer: node id → layer (0 at the top).
        slot: node id → place in its layer (0 at the left).
        layers: the node ids of each layer, left to right.
    """

    layer: dict[str, int]
    slot: dict[str, int]
    layers: list[list[str]]

    @property
    def widest(self) -> int:
        """How many nodes the widest layer holds (0 for no node)."""
        return max((len(ids) for ids in self.layers), default=0)


def layered_layout(node_ids: Sequence[str], edges: Iterable[tuple[str, str]]) -> Layout:
    """Lay out ``node_ids`` (declaration order; duplicates ignored) joined by ``edges``
    (``(source, target)``; an edge naming an unknown node, or a node to itself, is
    ignored).

    Returns:
        The :class:`Layout`.
    """
    order = {node_id: i for i, node_id in enumerate(dict.fromkeys(node_ids))}
    preds: dict[str, list[str]] = defaultdict(list)
    succs: dict[str, list[str]] = defaultdict(list)
    indegree = dict.fromkeys(order, 0)
    for source, target in dict.fromkeys(edges):
        if source == target or source not in order or target not in order:
            continue
        preds[target].append(source)
        succs[source].append(target)
        indegree[target] += 1
    layer: dict[str, int] = {}
    ready = deque(n for n in order if indegree[n] == 0)
    while ready:
        node = ready.popleft()
        layer[node] = max((layer[p] + 1 for p in preds[node] if p in layer), default=0)
        for nxt in succs[node]:
            indegree[nxt] -= 1
            if indegree[nxt] == 0:
                ready.append(nxt)
    for node in order:  # on a cycle: below the deepest node placed before it
        if node not in layer:
            layer[node] = max((layer[p] + 1 for p in preds[node] if p in layer), default=0)
    depth = max(layer.values(), default=-1) + 1
    layers: list[list[str]] = [[] for _ in range(depth)]
    for node in order:
        layers[layer[node]].append(node)
    slot = {node: i for ids in layers for i, node in enumerate(ids)}
    for _ in range(2):
        for ids in layers[1:]:
            def mean_slot(node: str) -> float:
                above = [slot[p] for p in preds[node] if layer[p] < layer[node]]
                return sum(above) / len(above) if above else float(slot[node])

            ids.sort(key=lambda n: (mean_slot(n), order[n]))
            for i, node in enumerate(ids):
                slot[node] = i
    return Layout(layer=layer, slot=slot, layers=layers)
