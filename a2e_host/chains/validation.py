"""Chain validation: a ``chain/req`` in, an immutable :class:`ChainPlan` (or every problem) out.

Layer: core (no I/O, no clock, no anyio). Source: PROTOCOL.md §3 (expressions), §4 (the
graph and validation), §5 (terminal nodes), §6 (ceilings), §8 (code precedence).

Theory of operation:

1. Chain-level checks: ``nodes`` not empty, ``max_nodes``, ``timeout`` > 0 and within
   ``max_timeout``.
2. Node ids are indexed (the first declaration wins; duplicates and reserved ids are
   problems).
3. Each node is checked on its own: kind, catalog (tool / skill registered, proc policy),
   granted capabilities, kind-specific fields, references to unknown nodes (in every edge
   field, even a branch side that would never be taken), and every expression compiled.
4. Map templates: a template runs only per item of its map. It may not be reached by any
   other control edge, serve two maps, be a branch or map, have ``next_node`` or an
   ``on_error`` handler, or be read at the root by anyone. Its own data dependencies are
   hoisted onto its map.
5. Edges: control (``next_node``, ``true_node``, ``false_node``, ``on_error`` handler) and
   data (a declared node id read at the root of one of a node's expressions). One
   ``out_edges`` entry per distinct target, kinds OR-ed; the map → template relation is
   not an edge.
6. Cycles: Tarjan's strongly connected components (iterative), then one shortest cycle
   per component by breadth-first search, for the ``a → b → a`` message. Linear time.
7. ``entry_node`` must name a root. Literal ``items_path`` lists are held to
   ``max_map_items``.

Validation is near-linear in the size of the request, also when it is hostile:
expressions are bounded in length and nesting before they are parsed
(:data:`~a2e_host.chains.expressions.MAX_EXPRESSION_NESTING`), every walk is iterative, and
"did you mean" suggestions are bounded: among many names a lookup goes through an index
of one-character deletions (names within about two edits), and only the first
:data:`_SUGGESTIONS` lookups of one validation are made (every problem is still reported).

Every problem is a dict ``{"code", "node_id", "field", "message", "hint"}`` (cycles add
``"path"``; ceilings add ``"ceiling", "scope", "limit", "requested"``; syntax errors add
``"column"``). All of them are raised together in one
:class:`~a2e_host.exceptions.ChainInvalid` whose code follows the precedence
``chain_cycle`` > ``chain_limit`` > ``chain_invalid``; when that first problem is a
ceiling, its four fields are also at the top of ``details`` (PROTOCOL.md §6).
"""

from __future__ import annotations

import difflib
import enum
from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from ..exceptions import ChainInvalid, ChainLimitExceeded
from ..limits import SessionLimits
from .expressions import (
    MAX_EXPRESSION_CHARS,
    MAX_EXPRESSION_NESTING,
    Expression,
    ExpressionError,
    ExpressionTooComplex,
    clip,
    compile_expression,
)
from .messages import ChainNode, ChainRequest

__all__ = [
    "Catalog",
    "ChainPlan",
    "EdgeKind",
    "PlanNode",
    "CONTEXT_KEYS",
    "KINDS",
    "RESERVED_IDS",
    "expression_chars",
    "validate_chain",
]

KINDS: tuple[str, ...] = ("tool", "skill", "proc", "branch", "map")
"""The node kinds (PROTOCOL.md §5)."""

CONTEXT_KEYS = frozenset({"input", "output", "item", "_item", "index", "error"})
"""Root fields of the context that are not node ids (PROTOCOL.md §3)."""

RESERVED_IDS = CONTEXT_KEYS | {"abort", "skip"}
"""Node ids a chain may not declare (PROTOCOL.md §3)."""

CHAIN_CYCLE, CHAIN_LIMIT, CHAIN_INVALID = "chain_cycle", "chain_limit", "chain_invalid"
_PRECEDENCE = (CHAIN_CYCLE, CHAIN_LIMIT, CHAIN_INVALID)
_LIMIT_FIELDS = ("ceiling", "scope", "limit", "requested")

_SUGGESTIONS = 64  # "did you mean" lookups one validation makes; later problems get none
_FEW_NAMES = 256  # up to this many names, a lookup compares the word with each one
_LONGEST_INDEXED = 64  # among many names, longer words and names are never suggested
_CANDIDATES = 64  # names ranked by one lookup among many

# Fields only one kind may set (an empty string means absent, PROTOCOL.md §4).
_KIND_ONLY_FIELDS = (
    ("condition", "branch"),
    ("true_node", "branch"),
    ("false_node", "branch"),
    ("items_path", "map"),
    ("map_node", "map"),
)
# Kinds whose nodes need a capability granted to the session (PROTOCOL.md §8).
_NEEDS_CAPABILITY = {"skill": "skill", "proc": "proc"}


class EdgeKind(enum.IntFlag):
    """Why one node follows another; several kinds between the same pair are OR-ed."""

    NEXT = 1
    TRUE = 2
    FALSE = 4
    HANDLER = 8
    DATA = 16


_CONTROL = int(EdgeKind.NEXT | EdgeKind.TRUE | EdgeKind.FALSE | EdgeKind.HANDLER)


class Catalog(Protocol):
    """What validation needs to know about the host's tools, skills and proc policy.

    A catalog may also have ``pack_providing(tool_name) -> str | None``: the installed
    tool pack, not enabled, that provides a tool; the problem of an unknown tool then
    names that pack and how to enable it. It is asked only for unknown tools.
    """

    def tool_names(self) -> Collection[str]:
        """Names of the registered tools."""
        ...

    def skill_names(self) -> Collection[str]:
        """Names of the registered skills."""
        ...

    def check_proc(self, node: ChainNode) -> str | None:
        """A static refusal message for a ``proc`` node (e.g. executable not allowed), or
        None when the policy does not refuse it before it runs."""
        ...


@dataclass(frozen=True, slots=True)
class PlanNode:
    """One node of a validated chain, with everything the scheduler needs precomputed.

    Attributes:
        index: position in ``request.nodes`` (declaration order).
        node: the node as decoded.
        node_id / kind: the node's id and kind.
        input_map: ``(key, expression)`` pairs in declaration order.
        condition: the compiled condition (branch), else None.
        items_path: the compiled items path (map), else None.
        next_index / true_index / false_index: control successors, None when absent.
        on_error: ``"abort"``, ``"skip"`` or ``"handler"``.
        handler_index: the handler node when ``on_error == "handler"``, else None.
        template_index: a map's template node, else None.
        template_of: a template's map node, else None.
        out_edges: ``(target, kinds)`` per distinct target, sorted by target, ``kinds`` the
            :class:`EdgeKind` bits as a plain int (IntFlag arithmetic is slow); never
            map → template.
        pred_count: distinct predecessors (control or data); 0 for roots and templates.
        has_control_preds: whether any NEXT / TRUE / FALSE / HANDLER edge comes in.
        terminal: no outgoing control or data edge (PROTOCOL.md §5); templates never are.
    """

    index: int
    node: ChainNode
    node_id: str
    kind: str
    input_map: tuple[tuple[str, Expression], ...]
    condition: Expression | None
    items_path: Expression | None
    next_index: int | None
    true_index: int | None
    false_index: int | None
    on_error: str
    handler_index: int | None
    template_index: int | None
    template_of: int | None
    out_edges: tuple[tuple[int, int], ...]
    pred_count: int
    has_control_preds: bool
    terminal: bool


@dataclass(frozen=True, slots=True)
class ChainPlan:
    """A validated chain, ready for the scheduler (nothing is re-derived at run time).

    Attributes:
        request: the ``chain/req`` as decoded.
        nodes: one :class:`PlanNode` per declared node, in declaration order.
        by_id: node_id → index (read-only).
        roots: nodes with no predecessor that are not templates, declaration order.
        terminals: terminal nodes, declaration order (PROTOCOL.md §5).
        entry: index of ``entry_node``.
        timeout: effective chain timeout, float seconds: ``min(request.timeout, max_timeout)``
            (``min(300, max_timeout)`` when the request left ``timeout`` out).
    """

    request: ChainRequest
    nodes: tuple[PlanNode, ...]
    by_id: Mapping[str, int]
    roots: tuple[int, ...]
    terminals: tuple[int, ...]
    entry: int
    timeout: float


def validate_chain(
    request: ChainRequest, catalog: Catalog, limits: SessionLimits, *, granted: frozenset[str]
) -> ChainPlan:
    """Validate a chain and build its plan (PROTOCOL.md §4, §6).

    Args:
        request: the decoded ``chain/req``.
        catalog: the host's tools, skills and proc policy.
        limits: the session's effective ceilings.
        granted: capabilities granted to the session (``skill`` and ``proc`` nodes need
            theirs).

    Returns:
        The immutable :class:`ChainPlan`.

    Raises:
        ChainInvalid: one or more problems; ``details["errors"]`` lists every one, and
            ``code`` is ``chain_cycle``, else ``chain_limit``, else ``chain_invalid``.
            When the code is ``chain_limit``, the first problem's ``ceiling``, ``scope``,
            ``limit`` and ``requested`` are also at the top of ``details``.
    """
    try:
        return _Validator(request, catalog, limits, granted).run()
    except RecursionError:  # a last resort: every walk here is meant to be iterative
        message = ("the chain nests too deeply to validate (an expression or a value inside "
                   "one is nested beyond what the host can walk)")
        problem = _problem(CHAIN_INVALID, "", "nodes", message,
                           f"keep expressions within {MAX_EXPRESSION_NESTING} levels of "
                           "nesting and split deep structures over several nodes")
        raise ChainInvalid(f"chain is invalid (1 problem); first: {message}",
                           details={"errors": [problem]}) from None


# ── problems ────────────────────────────────────────────────────────────────


def _problem(
    code: str, node_id: str, field: str, message: str, hint: str, **extra: Any
) -> dict[str, Any]:
    return {"code": code, "node_id": node_id, "field": field, "message": message,
            "hint": hint, **extra}


def _limit_problem(err: ChainLimitExceeded, node_id: str, field: str, hint: str) -> dict[str, Any]:
    return _problem(CHAIN_LIMIT, node_id, field, err.message, hint, **err.details)


class _Suggester:
    """"Did you mean" over one set of names, in time independent of the set's size.

    Up to :data:`_FEW_NAMES` names, the word is compared with each (difflib, cutoff 0.6).
    Among more, the names are indexed once by themselves and each one-character deletion
    of them, so a lookup finds the names within about two edits of the word (a
    substitution, insertion, deletion or swap) in ``len(word)`` dict lookups, and ranks at
    most :data:`_CANDIDATES` of them with difflib.
    """

    __slots__ = ("names", "_index")

    def __init__(self, names: Iterable[str]) -> None:
        self.names = list(names)
        self._index: dict[str, list[str]] | None = None

    def best(self, word: str) -> str | None:
        if len(self.names) <= _FEW_NAMES:
            close = difflib.get_close_matches(word, self.names, n=1, cutoff=0.6)
            return close[0] if close else None
        if len(word) > _LONGEST_INDEXED:
            return None
        index = self._index if self._index is not None else self._build()
        candidates: dict[str, None] = {}
        for variant in _deletions(word):
            for name in index.get(variant, ()):
                candidates[name] = None
                if len(candidates) >= _CANDIDATES:
                    break
            if len(candidates) >= _CANDIDATES:
                break
        close = difflib.get_close_matches(word, list(candidates), n=1, cutoff=0.6)
        return close[0] if close else None

    def _build(self) -> dict[str, list[str]]:
        index: dict[str, list[str]] = {}
        entry = index.setdefault
        for name in self.names:
            if len(name) <= _LONGEST_INDEXED:
                entry(name, []).append(name)
                for i in range(len(name)):  # a repeated letter may list a name twice
                    entry(name[:i] + name[i + 1 :], []).append(name)
        self._index = index
        return index


def _deletions(word: str) -> set[str]:
    """``word`` and every string one character shorter that it contains."""
    return {word, *(word[:i] + word[i + 1 :] for i in range(len(word)))}


def _at(node_id: str, field: str) -> str:
    return f"node {node_id!r} field {field!r}" if node_id else f"field {field!r}"


def _summary(problems: list[dict[str, Any]]) -> str:
    first = problems[0]
    count = len(problems)
    noun = "problem" if count == 1 else "problems"
    where = _at(first["node_id"], first["field"])
    return f"chain is invalid ({count} {noun}); first: {where}: {first['message']}"


# ── the validator ───────────────────────────────────────────────────────────


def expression_chars(nodes: Sequence[ChainNode]) -> int:
    """Characters of every JMESPath expression the nodes declare (``input_map`` values,
    ``condition``, ``items_path``): what ``max_chain_expression_chars`` bounds
    (PROTOCOL.md §6), and a cheap measure of how long validation will take."""
    total = 0
    for node in nodes:
        for text in node.input_map.values():
            total += len(text)
        total += len(node.condition) + len(node.items_path)
    return total


class _Validator:
    """One validation run; collects problems, then builds the plan if there are none."""

    def __init__(
        self, request: ChainRequest, catalog: Catalog, limits: SessionLimits,
        granted: frozenset[str],
    ) -> None:
        self.request = request
        self.catalog = catalog
        self.limits = limits
        self.granted = granted
        self.nodes = request.nodes
        self.problems: list[dict[str, Any]] = []
        self.compile_expressions = True  # False once their total text is refused
        self.by_id: dict[str, int] = {}
        n = len(self.nodes)
        self.next_i: list[int | None] = [None] * n
        self.true_i: list[int | None] = [None] * n
        self.false_i: list[int | None] = [None] * n
        self.handler_i: list[int | None] = [None] * n
        self.on_error: list[str] = ["abort"] * n
        self.template_i: list[int | None] = [None] * n
        self.template_of: list[int | None] = [None] * n
        self.input_map: list[tuple[tuple[str, Expression], ...]] = [()] * n
        self.condition: list[Expression | None] = [None] * n
        self.items_path: list[Expression | None] = [None] * n
        self.out: list[dict[int, int]] = [{} for _ in range(n)]  # EdgeKind bits
        self.declared: dict[tuple[int, int], tuple[str, str]] = {}
        self._tools: Collection[str] | None = None
        self._skills: Collection[str] | None = None
        self._suggesters: dict[str, _Suggester] = {}
        self._suggested: dict[tuple[str, str], str] = {}

    def add(self, problem: dict[str, Any]) -> None:
        self.problems.append(problem)

    def invalid(self, node_id: str, field: str, message: str, hint: str, **extra: Any) -> None:
        self.add(_problem(CHAIN_INVALID, node_id, field, message, hint, **extra))

    def suggest(self, word: str, among: str) -> str:
        """``"; did you mean 'x'?"`` when a name of the set ``among`` (``"ids"``,
        ``"roots"``, ``"kinds"``, ``"tools"``, ``"skills"``) is close to ``word``, else
        ``""``; bounded to :data:`_SUGGESTIONS` lookups per validation."""
        key = (among, word)
        found = self._suggested.get(key)
        if found is not None:
            return found
        if len(self._suggested) >= _SUGGESTIONS:
            return ""
        suggester = self._suggesters.get(among)
        if suggester is None:
            suggester = self._suggesters[among] = _Suggester(self.names_of(among))
        best = suggester.best(word)
        found = self._suggested[key] = f"; did you mean {best!r}?" if best else ""
        return found

    def names_of(self, among: str) -> Iterable[str]:
        if among == "ids":
            return self.by_id
        if among == "roots":
            return [*self.by_id, *sorted(CONTEXT_KEYS)]
        if among == "kinds":
            return KINDS
        if among == "tools":
            return self.tool_names()
        return self.skill_names()

    # 1. the chain as a whole

    def check_chain(self) -> None:
        req = self.request
        if not self.nodes:
            self.invalid("", "nodes", "the chain declares no nodes",
                         "add at least one node to 'nodes'")
        refused = self.limits.refusal("max_nodes", len(self.nodes))
        if refused is not None:
            self.add(_limit_problem(refused, "", "nodes",
                                    "split the work into smaller chains"))
        chars = expression_chars(self.nodes)
        refused = self.limits.refusal("max_chain_expression_chars", chars)
        if refused is not None:
            # compiling that much text is the cost the ceiling exists to avoid
            self.compile_expressions = False
            self.add(_limit_problem(refused, "", "nodes",
                                    "move work into tools or skills, or split the chain"))
        timeout = req.timeout_within(self.limits.effective.max_timeout)
        if timeout <= 0:
            self.invalid("", "timeout", f"timeout must be positive seconds, got {timeout}",
                         "set 'timeout' to a number of seconds above 0, or leave it out "
                         "for min(300, max_timeout)")
        else:
            refused = self.limits.refusal("max_timeout", timeout)
            if refused is not None:
                limit = refused.details["limit"]
                self.add(_limit_problem(refused, "", "timeout",
                                        f"set 'timeout' to at most {limit} seconds"))

    # 2. node ids

    def index_ids(self) -> None:
        for i, node in enumerate(self.nodes):
            nid = node.node_id
            if not nid:
                self.invalid("", f"nodes[{i}].node_id", f"nodes[{i}] has an empty node_id",
                             "give every node a unique, non-empty node_id")
                continue
            if nid in self.by_id:
                first = self.by_id[nid]
                self.invalid(nid, "node_id",
                             f"node id {nid!r} is declared twice (nodes[{first}] and nodes[{i}])",
                             "rename one of them; node ids must be unique")
                continue
            self.by_id[nid] = i
            if nid in RESERVED_IDS:
                self.invalid(nid, "node_id", f"node id {nid!r} is reserved",
                             f"rename the node; {', '.join(sorted(RESERVED_IDS))} are reserved "
                             "(context keys and on_error keywords)")

    def is_own(self, i: int) -> bool:
        """Whether nodes[i] is the declaration its id resolves to (not a duplicate)."""
        nid = self.nodes[i].node_id
        return bool(nid) and self.by_id.get(nid) == i

    # 3. each node on its own

    def resolve(self, i: int, field: str, target: str) -> int | None:
        """The index a reference names, or None after reporting an unknown one."""
        j = self.by_id.get(target)
        if j is None:
            nid = self.nodes[i].node_id
            self.invalid(nid, field, f"{field} names {target!r}, which is not a node of "
                         f"this chain{self.suggest(target, 'ids')}",
                         f"declare a node {target!r} or point {field} at an existing node")
        return j

    def check_node(self, i: int) -> None:
        node = self.nodes[i]
        nid = node.node_id
        kind = node.kind
        if kind not in KINDS:
            self.invalid(nid, "kind", f"unknown kind {kind!r}{self.suggest(kind, 'kinds')}",
                         f"use one of: {', '.join(KINDS)}")
        else:
            self.check_kind(i, node)
        for field, owner in _KIND_ONLY_FIELDS:
            if getattr(node, field) and kind != owner and kind in KINDS:
                self.invalid(nid, field, f"{field} is set on a {kind} node; only {owner} "
                             "nodes take it", f"remove {field} or make the node a {owner}")
        if node.next_node:
            self.next_i[i] = self.resolve(i, "next_node", node.next_node)
        if node.on_error in ("", "abort", "skip"):
            self.on_error[i] = node.on_error or "abort"
        else:
            self.on_error[i] = "handler"
            self.handler_i[i] = self.resolve(i, "on_error", node.on_error)
        self.compile_node(i, node)

    def check_kind(self, i: int, node: ChainNode) -> None:
        nid, kind = node.node_id, node.kind
        cap = _NEEDS_CAPABILITY.get(kind)
        if cap is not None and cap not in self.granted:
            self.invalid(nid, "kind", f"{kind} nodes need the {cap!r} capability, which this "
                         "session was not granted",
                         f"ask for {cap!r} in handshake/req agent_caps (the host must serve "
                         f"it), or replace the {kind} node")
        if kind == "tool":
            self.check_name(nid, node.name, "tool", self.tool_names(), "tools")
        elif kind == "skill":
            self.check_name(nid, node.name, "skill", self.skill_names(), "skills")
        elif kind == "proc":
            refusal = self.catalog.check_proc(node)
            if refusal:
                self.invalid(nid, "input", refusal,
                             "fix the proc input as the message says: argv[0] one of the "
                             "allowed names (see `a2e-host tools`), env keys from "
                             "proc_env_keys, no NUL bytes")
        elif kind == "branch":
            if not node.condition:
                self.invalid(nid, "condition", "branch node has no condition",
                             "set 'condition' to a JMESPath expression, e.g. "
                             "\"length(input.items) > `0`\"")
            if not node.true_node and not node.false_node:
                self.invalid(nid, "true_node", "branch node has neither true_node nor "
                             "false_node", "set true_node, false_node or both")
            if node.true_node:
                self.true_i[i] = self.resolve(i, "true_node", node.true_node)
            if node.false_node:
                self.false_i[i] = self.resolve(i, "false_node", node.false_node)
        elif kind == "map":
            if not node.items_path:
                self.invalid(nid, "items_path", "map node has no items_path",
                             "set 'items_path' to a JMESPath expression giving a list, "
                             "e.g. \"input.files\"")
            if not node.map_node:
                self.invalid(nid, "map_node", "map node has no map_node",
                             "set 'map_node' to the node_id to run once per item")
            else:
                self.template_i[i] = self.resolve(i, "map_node", node.map_node)

    def check_name(
        self, nid: str, name: str, what: str, names: Collection[str], among: str
    ) -> None:
        if not name:
            self.invalid(nid, "name", f"{what} node has no name",
                         f"set 'name' to a registered {what} (see `a2e-host tools`)")
        elif name not in names:
            pack = self.pack_providing(name) if among == "tools" else None
            if pack:
                self.invalid(nid, "name", f"unknown tool {name!r}; it is in the {pack!r} "
                             "pack, which is not enabled",
                             f"enable it with --tools +{pack}, or name it in A2E_TOOLS or "
                             "the configuration file's tools")
                return
            self.invalid(nid, "name", f"unknown {what} {name!r}{self.suggest(name, among)}",
                         f"use a registered {what} (see `a2e-host tools`) or enable the "
                         "pack that provides it")

    def pack_providing(self, name: str) -> str | None:
        """The catalog's not-enabled pack providing tool ``name``, when it can say."""
        lookup = getattr(self.catalog, "pack_providing", None)
        found = lookup(name) if lookup is not None else None
        return found if isinstance(found, str) and found else None

    def tool_names(self) -> Collection[str]:
        if self._tools is None:
            self._tools = self.catalog.tool_names()
        return self._tools

    def skill_names(self) -> Collection[str]:
        if self._skills is None:
            self._skills = self.catalog.skill_names()
        return self._skills

    def compile_one(self, nid: str, field: str, text: str) -> Expression | None:
        try:
            return compile_expression(text)
        except ExpressionTooComplex as exc:
            self.invalid(nid, field, f"expression {clip(text)} {exc.message}",
                         "split it over several nodes (each reads the one before) or simplify "
                         f"it; an expression may nest at most {MAX_EXPRESSION_NESTING} levels "
                         f"and have at most {MAX_EXPRESSION_CHARS:,} characters (put large "
                         "data in initial_input and read it as input.x)",
                         **({"column": exc.column} if exc.column is not None else {}))
            return None
        except ExpressionError as exc:
            where = f" at column {exc.column}" if exc.column is not None else ""
            self.invalid(nid, field, f"JMESPath syntax error in {clip(text)}{where}: "
                         f"{exc.message}",
                         "literals go in backticks (`0`, `\"text\"`); fields are read from "
                         "the context root (read.output, input.x)", column=exc.column)
            return None

    def compile_node(self, i: int, node: ChainNode) -> None:
        if not self.compile_expressions:
            return
        nid = node.node_id
        pairs = []
        for key, text in node.input_map.items():
            expr = self.compile_one(nid, f"input_map.{key}", text)
            if expr is not None:
                pairs.append((key, expr))
        self.input_map[i] = tuple(pairs)
        if node.kind == "branch" and node.condition:
            self.condition[i] = self.compile_one(nid, "condition", node.condition)
        if node.kind == "map" and node.items_path:
            self.items_path[i] = expr = self.compile_one(nid, "items_path", node.items_path)
            if expr is not None:
                self.check_literal_items(nid, expr)

    def check_literal_items(self, nid: str, expr: Expression) -> None:
        if not expr.is_literal:
            return
        items = expr.literal
        if not isinstance(items, list):
            self.invalid(nid, "items_path", f"items_path is a literal that is not a list: "
                         f"{expr.text}", "give items_path a list, e.g. `[1, 2, 3]` or input.items")
            return
        refused = self.limits.refusal("max_map_items", len(items), node_id=nid)
        if refused is not None:
            limit = refused.details["limit"]
            self.add(_limit_problem(refused, nid, "items_path",
                                    f"give the map at most {limit} items"))

    # 4. templates

    def check_templates(self) -> None:
        users: dict[int, list[int]] = {}
        for m, t in enumerate(self.template_i):
            if t is not None and self.is_own(m):
                users.setdefault(t, []).append(m)
        for t, maps in users.items():
            tnode = self.nodes[t]
            tid = tnode.node_id
            m = maps[0]
            mid = self.nodes[m].node_id
            if len(maps) > 1:
                names = ", ".join(repr(self.nodes[x].node_id) for x in maps)
                self.invalid(tid, "node_id", f"node {tid!r} is the map_node of several maps "
                             f"({names})", "give each map its own template node")
            if tnode.kind in ("branch", "map"):
                self.invalid(mid, "map_node", f"map_node {tid!r} is a {tnode.kind} node; a "
                             "template must be a tool, skill or proc node",
                             "point map_node at a tool, skill or proc node")
                continue
            self.template_of[t] = m
            if tnode.next_node:
                self.invalid(tid, "next_node", f"template node {tid!r} (of map {mid!r}) has a "
                             "next_node; a template runs only per item",
                             f"remove next_node and set next_node on map {mid!r} instead")
            if self.on_error[t] == "handler":
                self.invalid(tid, "on_error", f"template node {tid!r} (of map {mid!r}) has an "
                             "on_error handler; a template may use only abort or skip",
                             f"use abort or skip, and set the handler on map {mid!r}")

    def is_template(self, i: int) -> bool:
        return self.template_of[i] is not None

    # 5. edges

    def add_edge(self, src: int, dst: int, kind: EdgeKind, decl: tuple[str, str]) -> None:
        out = self.out[src]
        out[dst] = out.get(dst, 0) | int(kind)  # plain ints: IntFlag arithmetic is slow
        self.declared.setdefault((src, dst), decl)

    def build_control_edges(self) -> None:
        fields = (
            ("next_node", self.next_i, EdgeKind.NEXT),
            ("true_node", self.true_i, EdgeKind.TRUE),
            ("false_node", self.false_i, EdgeKind.FALSE),
            ("on_error", self.handler_i, EdgeKind.HANDLER),
        )
        for i, node in enumerate(self.nodes):
            if not self.is_own(i) or self.is_template(i):
                continue  # a template's own next_node / handler is reported, never followed
            for field, targets, kind in fields:
                j = targets[i]
                if j is None:
                    continue
                if self.is_template(j):
                    mid = self.nodes[self.template_of[j]].node_id  # type: ignore[index]
                    self.invalid(node.node_id, field, f"{field} points at {self.nodes[j].node_id!r}"
                                 f", the template of map {mid!r}; a template runs only per item",
                                 f"point {field} at map {mid!r} or at a node of its own")
                    continue
                self.add_edge(i, j, kind, (node.node_id, field))

    def expressions_of(self, i: int) -> Iterable[tuple[str, Expression]]:
        yield from ((f"input_map.{k}", e) for k, e in self.input_map[i])
        cond, items = self.condition[i], self.items_path[i]
        if cond is not None:
            yield "condition", cond
        if items is not None:
            yield "items_path", items

    def build_data_edges(self) -> None:
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
                    elif self.is_template(src):
                        mid = self.nodes[self.template_of[src]].node_id  # type: ignore[index]
                        self.invalid(bid, field, f"{expr.text!r} reads {root!r}, the template of "
                                     f"map {mid!r}, which has no output of its own",
                                     f"read {mid}.output (the list of item outputs) instead")
                    elif owner is not None and src == owner:
                        self.invalid(bid, field, f"template {bid!r} reads its own map {root!r}, "
                                     "whose output exists only after every item ran",
                                     "read the current item as item (and its position as index)")
                    else:
                        self.add_edge(src, waiter, EdgeKind.DATA, (bid, field))

    # 6. cycles

    def check_cycles(self) -> None:
        succ = [sorted(out) for out in self.out]
        cycles: list[dict[str, Any]] = []
        for comp in _strongly_connected(succ):
            if len(comp) == 1 and comp[0] not in self.out[comp[0]]:
                continue
            start = min(comp)
            path = _shortest_cycle(start, set(comp), succ)
            ids = [self.nodes[k].node_id for k in path]
            decl_node, decl_field = self.declared[(path[0], path[1])]
            arrow = " → ".join(ids)
            cycles.append(_problem(
                CHAIN_CYCLE, decl_node, decl_field,
                f"the chain has a cycle {arrow}; chains must be acyclic",
                f"remove one edge of the cycle, e.g. {decl_field} of node {decl_node!r}",
                path=ids,
            ))
        self.problems[:0] = cycles

    # 7. plan

    def run(self) -> ChainPlan:
        self.check_chain()
        self.index_ids()
        for i in range(len(self.nodes)):
            if self.is_own(i):
                self.check_node(i)
        self.check_templates()
        self.build_control_edges()
        self.build_data_edges()
        self.check_cycles()
        preds, control = self.count_preds()
        entry = self.check_entry(preds)
        if self.problems or entry is None:
            order = {code: rank for rank, code in enumerate(_PRECEDENCE)}
            problems = sorted(self.problems, key=lambda p: order[p["code"]])
            first = problems[0]
            details: dict[str, Any] = {"errors": problems}
            if first["code"] == CHAIN_LIMIT and all(k in first for k in _LIMIT_FIELDS):
                details = {**{k: first[k] for k in _LIMIT_FIELDS}, "errors": problems}
            raise ChainInvalid(_summary(problems), code=first["code"],
                               node_id=first["node_id"], details=details)
        return self.plan(preds, control, entry)

    def count_preds(self) -> tuple[list[int], list[bool]]:
        preds = [0] * len(self.nodes)
        control = [False] * len(self.nodes)
        for out in self.out:
            for dst, kind in out.items():
                preds[dst] += 1
                if kind & _CONTROL:
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

    def plan(self, preds: list[int], control: list[bool], entry: int) -> ChainPlan:
        nodes = []
        for i, node in enumerate(self.nodes):
            out = tuple(sorted(self.out[i].items()))
            template = self.is_template(i)
            nodes.append(PlanNode(
                index=i, node=node, node_id=node.node_id, kind=node.kind,
                input_map=self.input_map[i], condition=self.condition[i],
                items_path=self.items_path[i], next_index=self.next_i[i],
                true_index=self.true_i[i], false_index=self.false_i[i],
                on_error=self.on_error[i], handler_index=self.handler_i[i],
                template_index=self.template_i[i], template_of=self.template_of[i],
                out_edges=out, pred_count=preds[i], has_control_preds=control[i],
                terminal=not out and not template,
            ))
        roots = tuple(p.index for p in nodes if p.pred_count == 0 and p.template_of is None)
        terminals = tuple(p.index for p in nodes if p.terminal)
        max_timeout = self.limits.effective.max_timeout
        return ChainPlan(
            request=self.request, nodes=tuple(nodes), by_id=MappingProxyType(dict(self.by_id)),
            roots=roots, terminals=terminals, entry=entry,
            timeout=float(min(self.request.timeout_within(max_timeout), max_timeout)),
        )


# ── graph algorithms (iterative: deep chains cannot overflow the stack) ─────


def _strongly_connected(succ: list[list[int]]) -> list[list[int]]:
    """Tarjan's strongly connected components of the graph ``i → succ[i]``, iteratively."""
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


def _shortest_cycle(start: int, within: set[int], succ: list[list[int]]) -> list[int]:
    """The shortest path ``start → … → start`` inside one strongly connected component."""
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
