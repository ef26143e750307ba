"""Chain validation as a graph: edges, cycles, the entry node.

Layer: core (no I/O, no clock, no anyio). Source: PROTOCOL.md §4 (the graph, readiness),
§5 (terminal nodes). Steps 5-7 of :func:`~a2e_host.chains.validation.validate_chain`:

5. Edges: control (each kind's control edge fields with a plan bit, from
   :data:`~a2e_host.chains.kinds.NODE_KINDS`: ``next_node``, ``true_node``, ``false_node``,
   ``on_error`` handler) and data (a declared node id read at the root of one of a node's
   expressions). One ``out_edges`` entry per distinct target, kinds OR-ed; the map →
   template relation is not an edge, a template's own control edges are never followed,
   and a template's reads are hoisted onto its map.
6. Cycles: Tarjan's strongly connected components (iterative), then one shortest cycle
   per component by breadth-first search, for the ``a → b → a`` message. Linear time.
7. ``entry_node`` must name a root.

The edges as declared, before the template rules apply, are what ``a2e-host graph`` draws
(:meth:`GraphChecks.declared_edges`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from ..limits import SessionLimits
from .catalog import Catalog
from .expressions import Expression
from .kinds import ControlEdge, EdgeKind
from .messages import ChainRequest
from .node_checks import CONTEXT_KEYS, NodeChecks
from .problems import CHAIN_CYCLE, problem

__all__ = ["DeclaredEdge", "GraphChecks"]

_DATA = int(EdgeKind.DATA)


@dataclass(frozen=True, slots=True)
class DeclaredEdge:
    """One reference of a chain's declaration to another of its nodes.

    Attributes:
        source / target: node ids; for a data edge the node read and the node reading it.
        field: the field holding the reference (``next_node``, ``map_node``,
            ``input_map.path``, ``condition`` …).
        control: the control edge's row of the kind table, None for a data edge.
    """

    source: str
    target: str
    field: str
    control: ControlEdge | None


class GraphChecks(NodeChecks):
    """The graph steps of one validation run (after :class:`NodeChecks`' steps).

    Args:
        request / catalog / limits / granted: as for :class:`NodeChecks`.
        keep_reads: keep every data read for :meth:`declared_edges`.

    Attributes:
        out: per node, target index → :class:`EdgeKind` bits (plain ints).
        declared_by: per edge ``(source, target)``, the ``(node_id, field)`` that first
            declared it (named by a cycle's problem).
        reads: every data read ``(source, reader, field)`` before the template rules,
            kept only when asked for (None otherwise).
    """

    def __init__(
        self, request: ChainRequest, catalog: Catalog | None, limits: SessionLimits | None,
        granted: frozenset[str] | None, *, keep_reads: bool = False,
    ) -> None:
        super().__init__(request, catalog, limits, granted)
        self.out: list[dict[int, int]] = [{} for _ in range(len(self.nodes))]
        self.declared_by: dict[tuple[int, int], tuple[str, str]] = {}
        self.reads: list[tuple[int, int, str]] | None = [] if keep_reads else None

    # ── 5. edges ──

    def add_edge(self, src: int, dst: int, kind: int, decl: tuple[str, str]) -> None:
        out = self.out[src]
        out[dst] = out.get(dst, 0) | kind  # plain ints: IntFlag arithmetic is slow
        self.declared_by.setdefault((src, dst), decl)

    def build_control_edges(self) -> None:
        targets = self.targets
        rows = self.kinds.rows
        common = self.kinds.common_plan_edges
        for i, node in enumerate(self.nodes):
            if not self.is_own(i) or self.is_template(i):
                continue  # a template's own next_node / handler is reported, never followed
            row = rows.get(node.kind)
            # map_node is no plan edge: the template runs per item of its map
            for field, bit in common if row is None else row.plan_edges:
                j = targets[field][i]
                if j is None:
                    continue
                if self.is_template(j):
                    mid = self.nodes[self.template_of[j]].node_id  # type: ignore[index]
                    self.invalid(node.node_id, field, f"{field} points at {self.nodes[j].node_id!r}"
                                 f", the template of map {mid!r}; a template runs only per item",
                                 f"point {field} at map {mid!r} or at a node of its own")
                    continue
                self.add_edge(i, j, bit, (node.node_id, field))

    def expressions_of(self, i: int) -> Iterable[tuple[str, Expression]]:
        yield from ((f"input_map.{k}", e) for k, e in self.input_map[i])
        for field, exprs in self.exprs.items():
            expr = exprs[i]
            if expr is not None:
                yield field, expr

    def build_data_edges(self) -> None:
        reads = self.reads
        for b, node in enumerate(self.nodes):
            if not self.is_own(b):
                continue
            bid = node.node_id
            owner = self.template_of[b]
            waiter = b if owner is None else owner  # a template's reads are hoisted onto its map
            for field, expr in self.expressions_of(b):
                for root in sorted(expr.roots):
                    if root in CONTEXT_KEYS:
                        continue
                    src = self.by_id.get(root)
                    if src is None:
                        self.invalid(bid, field, f"{expr.text!r} reads {root!r}, which is neither "
                                     "a node of this chain nor a context key"
                                     f"{self.suggest(root, 'roots')}",
                                     "read a declared node's output (<node_id>.output) or a "
                                     f"context key: {', '.join(sorted(CONTEXT_KEYS))}")
                        continue
                    if reads is not None:
                        reads.append((src, b, field))
                    if self.is_template(src):
                        mid = self.nodes[self.template_of[src]].node_id  # type: ignore[index]
                        self.invalid(bid, field, f"{expr.text!r} reads {root!r}, the template of "
                                     f"map {mid!r}, which has no output of its own",
                                     f"read {mid}.output (the list of item outputs) instead")
                    elif owner is not None and src == owner:
                        self.invalid(bid, field, f"template {bid!r} reads its own map {root!r}, "
                                     "whose output exists only after every item ran",
                                     "read the current item as item (and its position as index)")
                    else:
                        self.add_edge(src, waiter, _DATA, (bid, field))

    def declared_edges(self) -> tuple[DeclaredEdge, ...]:
        """The declaration's edges between declared nodes, as read by steps 3 and 5.

        Control edges come first, node by node in declaration order and each node's in its
        kind's edge order; then one data edge per (node read, node reading), by reading
        node in declaration order, then by the id read. Nothing of the template rules
        applies: a template's own edges, edges into it and its reads are listed as
        declared. Needs ``keep_reads=True`` and :meth:`build_data_edges` done.
        """
        nodes = self.nodes
        edges: list[DeclaredEdge] = []
        for i, node in enumerate(nodes):
            if not self.is_own(i):
                continue
            for edge in self.kinds.edges_of(node.kind):
                j = self.targets[edge.field][i]
                if j is not None:
                    edges.append(DeclaredEdge(node.node_id, nodes[j].node_id, edge.field, edge))
        seen: set[tuple[int, int]] = set()
        for src, reader, field in sorted(self.reads or (),
                                         key=lambda r: (r[1], nodes[r[0]].node_id)):
            if (src, reader) not in seen:
                seen.add((src, reader))
                edges.append(DeclaredEdge(nodes[src].node_id, nodes[reader].node_id, field,
                                          None))
        return tuple(edges)

    # ── 6. cycles ──

    def check_cycles(self) -> None:
        succ = [sorted(out) for out in self.out]
        for comp in strongly_connected(succ):
            if len(comp) == 1 and comp[0] not in self.out[comp[0]]:
                continue
            start = min(comp)
            path = shortest_cycle(start, set(comp), succ)
            ids = [self.nodes[k].node_id for k in path]
            decl_node, decl_field = self.declared_by[(path[0], path[1])]
            arrow = " → ".join(ids)
            self.problems.add(problem(  # listed first whatever came before: code order
                CHAIN_CYCLE, decl_node, decl_field,
                f"the chain has a cycle {arrow}; chains must be acyclic",
                f"remove one edge of the cycle, e.g. {decl_field} of node {decl_node!r}",
                path=ids,
            ))

    # ── 7. predecessors and the entry node ──

    def count_preds(self) -> tuple[list[int], list[bool]]:
        preds = [0] * len(self.nodes)
        control = [False] * len(self.nodes)
        control_bits = self.kinds.control_bits
        for out in self.out:
            for dst, kind in out.items():
                preds[dst] += 1
                if kind & control_bits:
                    control[dst] = True
        return preds, control

    def check_entry(self, preds: list[int]) -> int | None:
        entry = self.request.entry_node
        roots = [n.node_id for i, n in enumerate(self.nodes)
                 if self.is_own(i) and preds[i] == 0 and not self.is_template(i)]
        hint = f"set entry_node to a root: {', '.join(roots[:5])}" if roots else \
            "make one node a root (nothing points to it or reads it)"
        if not entry:
            self.invalid("", "entry_node", "entry_node is empty", hint)
            return None
        i = self.by_id.get(entry)
        if i is None:
            self.invalid("", "entry_node", f"entry_node {entry!r} is not a node of this chain"
                         f"{self.suggest(entry, 'ids')}", hint)
            return None
        if self.is_template(i):
            mid = self.nodes[self.template_of[i]].node_id  # type: ignore[index]
            self.invalid(entry, "entry_node", f"entry_node {entry!r} is the template of map "
                         f"{mid!r} and runs only per item", hint)
            return None
        if preds[i]:
            before = [self.nodes[s].node_id for s, out in enumerate(self.out) if i in out]
            shown = ", ".join(repr(b) for b in before[:3])
            self.invalid(entry, "entry_node", f"entry_node {entry!r} is not a root: it follows "
                         f"{shown}", hint)
            return None
        return i


# ── graph algorithms (iterative: deep chains cannot overflow the stack) ─────


def strongly_connected(succ: list[list[int]]) -> list[list[int]]:
    """Tarjan's strongly connected components of the graph ``i → succ[i]``, iteratively.

    Args:
        succ: per node index, the indices it points to.

    Returns:
        The components, each a list of node indices, in Tarjan's completion order.
    """
    n = len(succ)
    index = [-1] * n
    low = [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    comps: list[list[int]] = []
    counter = 0
    for root in range(n):
        if index[root] != -1:
            continue
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack[root] = True
        work = [(root, iter(succ[root]))]
        while work:
            v, it = work[-1]
            for w in it:
                if index[w] == -1:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack[w] = True
                    work.append((w, iter(succ[w])))
                    break
                if on_stack[w]:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    u = work[-1][0]
                    low[u] = min(low[u], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack[w] = False
                        comp.append(w)
                        if w == v:
                            break
                    comps.append(comp)
    return comps


def shortest_cycle(start: int, within: set[int], succ: list[list[int]]) -> list[int]:
    """The shortest path ``start → … → start`` inside one strongly connected component.

    Args:
        start: a node of the component.
        within: the component's nodes.
        succ: per node index, the indices it points to.

    Returns:
        The node indices of the path, ``start`` first and last.
    """
    parent: dict[int, int] = {}
    queue = deque([start])
    while queue:
        v = queue.popleft()
        for w in succ[v]:
            if w == start:
                path = [start]
                while v != start:
                    path.append(v)
                    v = parent[v]
                path.append(start)
                path.reverse()
                return path
            if w in within and w not in parent:
                parent[w] = v
                queue.append(w)
    raise AssertionError("a strongly connected component always holds a cycle")
