"""Pieces shared by the two reference schedulers: wire structs, tools, expressions, the graph.

Both references (``reference_minimal``, ``reference_spec``) decode the same msgspec structs,
compile expressions through the same cache and build the same graph, so the benchmark
compares *scheduling designs*, not parsers. Nothing here imports ``a2e_host``.

Semantics follow docs/PROTOCOL.md: §3 (context and expressions), §4 (graph,
readiness, validation) and §5 (events, response).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import jmespath
import msgspec

# --------------------------------------------------------------------------- wire structs


class ChainNode(msgspec.Struct, kw_only=True):
    node_id: str
    kind: str
    name: str = ""
    input: dict[str, Any] = {}
    input_map: dict[str, str] = {}
    condition: str = ""
    true_node: str = ""
    false_node: str = ""
    items_path: str = ""
    map_node: str = ""
    next_node: str = ""
    on_error: str = "abort"


class ChainRequest(msgspec.Struct, kw_only=True, tag="chain/req", tag_field="type"):
    id: str = ""
    version: str = "1.0"
    ts: float = 0.0
    session_id: str = ""
    chain_id: str = ""
    nodes: list[ChainNode] = []
    entry_node: str = ""
    initial_input: dict[str, Any] = {}
    correlation_id: str = ""
    streaming: bool = True
    timeout: int = 300


class ChainEvent(msgspec.Struct, kw_only=True, tag="chain/event", tag_field="type"):
    id: str
    version: str = "1.0"
    ts: float
    req_id: str
    node_id: str
    phase: str
    output: Any = None
    error: str = ""
    seq: int
    kind: str = "status"
    data: dict[str, Any] = {}


class ChainResponse(msgspec.Struct, kw_only=True, tag="chain/resp", tag_field="type"):
    id: str
    version: str = "1.0"
    ts: float
    req_id: str
    chain_id: str
    success: bool
    outputs: dict[str, Any]
    final_output: Any = None
    duration_ms: int
    nodes_run: int
    error: dict[str, Any] | None = None


REQUEST_DECODER = msgspec.json.Decoder(ChainRequest)
ENCODER = msgspec.json.Encoder()


class IdMaker:
    """Unique 32-hex-digit message ids: a random 96-bit prefix per request plus a counter.

    Cheaper than ``uuid4()`` per message (which costs ~2 µs); equally unique.
    """

    __slots__ = ("prefix", "n")

    def __init__(self) -> None:
        self.prefix = os.urandom(12).hex()
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"{self.prefix}{self.n:08x}"


# --------------------------------------------------------------------------- tools


def _noop(inp: dict[str, Any]) -> Any:
    return inp.get("x")


def _sleep_ms_sync(inp: dict[str, Any]) -> Any:
    time.sleep(float(inp["ms"]) / 1000.0)
    return inp.get("x")


async def _noop_async(inp: dict[str, Any]) -> Any:
    return inp.get("x")


async def _sleep_ms_async(inp: dict[str, Any]) -> Any:
    import asyncio

    await asyncio.sleep(float(inp["ms"]) / 1000.0)
    return inp.get("x")


#: The ``bench`` tool pack, blocking flavour (for the thread-per-node design).
SYNC_TOOLS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "noop": _noop,
    "sleep_ms": _sleep_ms_sync,
}
#: The ``bench`` tool pack, coroutine flavour (for asyncio schedulers).
ASYNC_TOOLS = {"noop": _noop_async, "sleep_ms": _sleep_ms_async}

# --------------------------------------------------------------------------- expressions

#: Root keys of the context that are not node ids (PROTOCOL.md §3).
RESERVED = frozenset({"input", "output", "item", "_item", "index", "error", "abort", "skip"})

# Node types whose first child is evaluated against the same value as the parent and
# whose other children are evaluated against its result (so they read no root field).
_LEFT_ONLY = frozenset(
    {"subexpression", "index_expression", "projection", "value_projection",
     "filter_projection", "pipe", "flatten"}
)
# Node types all of whose children are evaluated against the parent's value.
_ALL_CHILDREN = frozenset(
    {"multi_select_list", "or_expression", "and_expression", "not_expression",
     "comparator", "function_expression", "key_val_pair"}
)


def root_fields(ast: dict[str, Any]) -> set[str]:
    """Field names an expression reads from the root of the context (PROTOCOL.md §4)."""
    t = ast["type"]
    if t == "field":
        return {ast["value"]}
    children = ast.get("children", [])
    if t in _LEFT_ONLY:
        return root_fields(children[0]) if children else set()
    if t in _ALL_CHILDREN or t == "multi_select_dict":
        out: set[str] = set()
        for c in children:
            out |= root_fields(c)
        return out
    return set()  # literal, current, expref, index, slice, identity, ...


class DottedPath:
    """``a.b.c`` resolved with dict lookups; same result as JMESPath (field of an object,
    else null)."""

    __slots__ = ("parts",)

    def __init__(self, parts: list[str]) -> None:
        self.parts = parts

    def search(self, value: Any) -> Any:
        for p in self.parts:
            try:
                value = value.get(p)
            except AttributeError:
                return None
        return value


def _dotted(text: str) -> DottedPath | None:
    parts = text.split(".")
    for p in parts:
        if not p or not (p[0].isalpha() or p[0] == "_") or not p.isascii():
            return None
        if not p.replace("_", "a").isalnum():
            return None
    return DottedPath(parts)


_CACHE: dict[tuple[str, bool], tuple[Any, frozenset[str]]] = {}


def compile_expr(text: str, fast: bool = False) -> tuple[Any, frozenset[str]]:
    """Compile once per text (process-wide cache). Returns (object with .search, root fields).

    ``fast``: plain dotted paths get a :class:`DottedPath` instead of a JMESPath tree.
    A leading ``$.`` means the root. Raises ``jmespath.exceptions.ParseError``.
    """
    key = (text, fast)
    hit = _CACHE.get(key)
    if hit is None:
        src = text[2:] if text.startswith("$.") else text
        parsed = jmespath.compile(src)
        roots = frozenset(root_fields(parsed.parsed))
        evaluator = (_dotted(src) if fast else None) or parsed
        hit = _CACHE[key] = (evaluator, roots)
    return hit


# --------------------------------------------------------------------------- the graph

# Edge kinds from a source to a successor (one entry per (source, successor) pair).
DATA, NEXT, TRUE, FALSE, ONERR = 0, 1, 2, 3, 4


class ChainInvalid(Exception):
    def __init__(self, code: str, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.code = code
        self.problems = problems


class Plan:
    """The validated graph of one chain, as index-based arrays.

    ``succ[i]``: list of (j, kind) — at most one entry per pair, the control kind winning
    over DATA. ``preds[i]``: the same pairs seen from j. ``tmpl[i]``: index of a map's
    template or -1. Templates are outside the graph (they never run on their own).
    """

    def __init__(self, req: ChainRequest, tools: dict[str, Any], fast: bool = False) -> None:
        nodes = req.nodes
        self.nodes = nodes
        n = len(nodes)
        self.ids = ids = [nd.node_id for nd in nodes]
        index: dict[str, int] = {}
        problems: list[str] = []
        for i, nid in enumerate(ids):
            if nid in index:
                problems.append(f"duplicate node_id {nid!r}")
            if nid in RESERVED or not nid:
                problems.append(f"reserved node_id {nid!r}")
            index[nid] = i
        self.index = index
        self.inputs: list[list[tuple[str, Any]]] = [[] for _ in range(n)]
        self.cond: list[Any] = [None] * n
        self.items: list[Any] = [None] * n
        self.tmpl = [-1] * n
        self.uses_output = [False] * n
        self.uses_error = [False] * n
        deps: list[set[str]] = [set() for _ in range(n)]
        is_template = [False] * n
        for i, nd in enumerate(nodes):
            exprs: list[tuple[str, str]] = [("input_map", v) for v in nd.input_map.values()]
            if nd.kind == "tool":
                if nd.name not in tools:
                    problems.append(f"node {nd.node_id!r}: unknown tool {nd.name!r}")
            elif nd.kind == "branch":
                if not nd.condition or not (nd.true_node or nd.false_node):
                    problems.append(f"node {nd.node_id!r}: branch needs condition and targets")
                exprs.append(("condition", nd.condition))
            elif nd.kind == "map":
                if not nd.items_path or nd.map_node not in index:
                    problems.append(f"node {nd.node_id!r}: map needs items_path and map_node")
                else:
                    self.tmpl[i] = t = index[nd.map_node]
                    is_template[t] = True
                exprs.append(("items_path", nd.items_path))
            else:
                problems.append(f"node {nd.node_id!r}: unsupported kind {nd.kind!r}")
            keys = iter(nd.input_map)
            for fld, text in exprs:
                try:
                    ev, roots = compile_expr(text, fast)
                except Exception as exc:  # jmespath raises several ParseError types
                    problems.append(f"node {nd.node_id!r}: bad {fld} {text!r}: {exc}")
                    ev, roots = None, frozenset()
                deps[i] |= roots
                if fld == "condition":
                    self.cond[i] = ev
                elif fld == "items_path":
                    self.items[i] = ev
                else:
                    self.inputs[i].append((next(keys), ev))
            self.uses_output[i] = "output" in deps[i]
            self.uses_error[i] = "error" in deps[i]
            deps[i] -= RESERVED
        self.is_template = is_template
        # A template's own data dependencies become its map's.
        for i, t in enumerate(self.tmpl):
            if t >= 0:
                deps[i] |= deps[t]
        succ: list[dict[int, int]] = [{} for _ in range(n)]

        def edge(i: int, target: str, kind: int, fld: str) -> None:
            j = index.get(target)
            if j is None:
                problems.append(f"node {ids[i]!r}: {fld} names unknown node {target!r}")
            elif is_template[j]:
                problems.append(f"node {ids[i]!r}: {fld} reaches map template {target!r}")
            else:
                succ[i][j] = kind if succ[i].get(j, DATA) == DATA else succ[i][j]

        for i, nd in enumerate(nodes):
            if is_template[i]:
                continue
            if nd.next_node:
                edge(i, nd.next_node, NEXT, "next_node")
            if nd.kind == "branch":
                if nd.true_node:
                    edge(i, nd.true_node, TRUE, "true_node")
                if nd.false_node:
                    edge(i, nd.false_node, FALSE, "false_node")
            if nd.on_error not in ("abort", "skip"):
                edge(i, nd.on_error, ONERR, "on_error")
            for d in deps[i]:
                j = index.get(d)
                if j is None:
                    problems.append(f"node {ids[i]!r}: expression reads unknown node {d!r}")
                elif j == i:
                    problems.append(f"node {ids[i]!r}: reads itself")
                else:
                    succ[j].setdefault(i, DATA)
        self.succ = [list(s.items()) for s in succ]
        preds: list[list[tuple[int, int]]] = [[] for _ in range(n)]
        for i, s in enumerate(self.succ):
            for j, kind in s:
                preds[j].append((i, kind))
        self.preds = preds
        self.has_control_in = [any(k != DATA for _, k in p) for p in preds]
        # Cycle check (Kahn) over the graph without templates.
        indeg = [len(p) for p in preds]
        stack = [i for i in range(n) if indeg[i] == 0 and not is_template[i]]
        seen = 0
        while stack:
            i = stack.pop()
            seen += 1
            for j, _ in self.succ[i]:
                indeg[j] -= 1
                if indeg[j] == 0:
                    stack.append(j)
        graph_nodes = n - sum(is_template)
        if seen != graph_nodes:
            raise ChainInvalid("chain_cycle", ["the graph has a cycle"] + problems)
        e = index.get(req.entry_node)
        if e is None or preds[e] or is_template[e]:
            problems.append(f"entry_node {req.entry_node!r} is not a root")
        if problems:
            raise ChainInvalid("chain_invalid", problems)
        self.roots = [i for i in range(n) if not preds[i] and not is_template[i]]
        self.graph_nodes = graph_nodes
        # Terminal nodes: no outgoing edge; templates never terminal (§5).
        self.terminals = [i for i in range(n) if not self.succ[i] and not is_template[i]]


def final_output(plan: Plan, status: list[str], outputs: list[Any]) -> Any:
    """The output of the last terminal node, in declaration order, that is done (§5)."""
    for i in reversed(plan.terminals):
        if status[i] == "done":
            return outputs[i]
    return None


def invalid_response(req: ChainRequest, exc: ChainInvalid, t0: float) -> bytes:
    return ENCODER.encode(
        ChainResponse(
            id=os.urandom(16).hex(), ts=time.time(), req_id=req.id, chain_id=req.chain_id,
            success=False, outputs={}, duration_ms=int((time.perf_counter() - t0) * 1000),
            nodes_run=0,
            error={"code": exc.code, "message": str(exc), "node_id": "", "retryable": False,
                   "details": {"problems": exc.problems}},
        )
    )
