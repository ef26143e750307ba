"""Chain validation, node by node: ids, kinds, names, references, expressions, templates.

Layer: core (no I/O, no clock, no anyio). Source: PROTOCOL.md §3 (expressions), §4 (node
fields, references), §5 (kinds), §8 (gates). Steps 2-4 of
:func:`~a2e_host.chains.validation.validate_chain`:

2. Node ids are indexed (the first declaration wins; duplicates and reserved ids are
   problems).
3. Each node is checked on its own, as its kind's row of
   :data:`~a2e_host.chains.kinds.NODE_KINDS` says: its gate granted, its required fields,
   its name registered (tool, skill) or its proc policy, its further checks, no field
   another kind owns, every control edge field naming a declared node (even a branch side
   that would never be taken), and every expression compiled.
4. Map templates: a template runs only per item of its map. It may not serve two maps,
   be of a control kind, have ``next_node`` or an ``on_error`` handler.

:class:`NodeChecks` holds the state a validation run shares between its steps;
:class:`~a2e_host.chains.graph_checks.GraphChecks` extends it with the edges.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from ..exceptions import ChainLimitExceeded
from ..grants import TOOL_DENIED, ToolGrant
from ..limits import SessionLimits
from . import kinds as kind_table
from .catalog import Catalog
from .expressions import (
    MAX_EXPRESSION_CHARS,
    MAX_EXPRESSION_NESTING,
    Expression,
    ExpressionError,
    ExpressionTooComplex,
    clip,
    compile_expression,
)
from .hints import MAX_SUGGESTIONS, Suggester
from .kinds import COMMON_EDGES, MAP_NODE, ON_ERROR, KindRow, KindSpec, one_of
from .messages import ChainNode, ChainRequest
from .problems import CHAIN_INVALID, Problems, limit_problem, problem

__all__ = ["CONTEXT_KEYS", "RESERVED_IDS", "NodeChecks"]

CONTEXT_KEYS = frozenset({"input", "output", "item", "_item", "index", "error"})
"""Root fields of the context that are not node ids (PROTOCOL.md §3)."""

RESERVED_IDS = CONTEXT_KEYS | {"abort", "skip"}
"""Node ids a chain may not declare (PROTOCOL.md §3)."""

_COMMON_EDGES = tuple((edge.field, edge.keywords) for edge in COMMON_EDGES)


class NodeChecks:
    """The node-by-node steps of one validation run, and the state every step shares.

    Args:
        request: the decoded ``chain/req``.
        catalog: the host's tools, skills and proc policy; None reads the chain without
            asking about names or policy (drawing a chain, which checks none of them).
        limits: the session's ceilings; None checks none.
        granted: the session's capabilities; None checks no gate.

    Attributes:
        tool_grant: the tools the session's principal may name (``tool_denied``
            problems for others); None: every tool.
    """

    tool_grant: ToolGrant | None = None

    def __init__(
        self, request: ChainRequest, catalog: Catalog | None, limits: SessionLimits | None,
        granted: frozenset[str] | None,
    ) -> None:
        self.request = request
        self.catalog = catalog
        self.limits = limits
        self.granted = granted
        self.kinds = kind_table.NODE_KINDS
        self.rows = self.kinds.rows
        self.nodes = request.nodes
        self.problems = Problems()  # counted, the first of each code kept
        self.compile_expressions = True  # False once their total text is refused
        self.by_id: dict[str, int] = {}
        n = len(self.nodes)
        # control edge field → per node, the index it names (None: absent or unknown)
        self.targets: dict[str, list[int | None]] = {
            field: [None] * n for field in self.kinds.edge_fields}
        self.on_error: list[str] = ["abort"] * n
        self.template_of: list[int | None] = [None] * n
        self.input_map: list[tuple[tuple[str, Expression], ...]] = [()] * n
        # a kind's own expression field (condition, items_path) → per node, compiled
        self.exprs: dict[str, list[Expression | None]] = {
            field: [None] * n for spec in self.kinds.specs.values()
            for field in spec.expressions}
        self.notices: dict[int, dict[str, str]] = {}
        """Node index → ``data`` of its ``start`` event: a deprecated skill's warning."""
        self._tools: Collection[str] | None = None
        self._skills: Collection[str] | None = None
        self._suggesters: dict[str, Suggester] = {}
        self._suggested: dict[tuple[str, str], str] = {}

    # ── problems ──

    def add(self, found: dict[str, Any]) -> None:
        self.problems.add(found)

    def invalid(self, node_id: str, field: str, message: str, hint: str, **extra: Any) -> None:
        self.add(problem(CHAIN_INVALID, node_id, field, message, hint, **extra))

    def add_limit(self, refused: ChainLimitExceeded, node_id: str, field: str,
                  hint: str) -> None:
        self.add(limit_problem(refused, node_id, field, hint))

    def suggest(self, word: str, among: str) -> str:
        """``"; did you mean 'x'?"`` when a name of the set ``among`` (``"ids"``,
        ``"roots"``, ``"kinds"``, ``"tools"``, ``"skills"``) is close to ``word``, else
        ``""``; bounded to :data:`~a2e_host.chains.hints.MAX_SUGGESTIONS` lookups per
        validation."""
        key = (among, word)
        found = self._suggested.get(key)
        if found is not None:
            return found
        if len(self._suggested) >= MAX_SUGGESTIONS:
            return ""
        suggester = self._suggesters.get(among)
        if suggester is None:
            suggester = self._suggesters[among] = Suggester(self.names_of(among))
        best = suggester.best(word)
        found = self._suggested[key] = f"; did you mean {best!r}?" if best else ""
        return found

    def names_of(self, among: str) -> Iterable[str]:
        if among == "ids":
            return self.by_id
        if among == "roots":
            return [*self.by_id, *sorted(CONTEXT_KEYS)]
        if among == "kinds":
            return self.kinds.names
        if among == "tools":
            grant = self.tool_grant
            names = self.tool_names()
            return names if grant is None else [n for n in names
                                                if grant.allows(n, self.tool_pack(n))]
        return self.skill_names()

    # ── 2. node ids ──

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

    def is_template(self, i: int) -> bool:
        return self.template_of[i] is not None

    # ── 3. each node on its own ──

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
        row = self.rows.get(kind)
        if row is None:
            self.invalid(nid, "kind", f"unknown kind {kind!r}{self.suggest(kind, 'kinds')}",
                         f"use one of: {', '.join(self.kinds.names)}")
        else:
            self.check_kind(i, node, row)
            for field, owners in row.foreign_fields:
                if getattr(node, field):
                    self.invalid(nid, field, f"{field} is set on a {kind} node; only {owners} "
                                 "nodes take it", f"remove {field} or make the node a {owners}")
        for field, keywords in _COMMON_EDGES:
            target = getattr(node, field)
            if target not in keywords:
                self.targets[field][i] = self.resolve(i, field, target)
        on_error = node.on_error
        self.on_error[i] = (on_error or "abort") if on_error in ON_ERROR.keywords else "handler"
        self.compile_node(i, node, row.spec if row is not None else None)

    def check_kind(self, i: int, node: ChainNode, row: KindRow) -> None:
        """The checks of the node's row of the kind table, in the table's column order."""
        spec = row.spec
        nid, kind = node.node_id, node.kind
        gate = spec.gate
        if gate is not None and self.granted is not None and gate not in self.granted:
            self.invalid(nid, "kind", f"{kind} nodes need the {gate!r} capability, which this "
                         "session was not granted",
                         f"ask for {gate!r} in handshake/req agent_caps (the host must serve "
                         f"it), or replace the {kind} node")
        for required in spec.required:
            for field in required.fields:
                if getattr(node, field):
                    break
            else:
                self.invalid(nid, required.fields[0], required.message, required.hint)
        if self.catalog is not None:
            if spec.registry is not None and node.name:
                self.check_name(nid, node.name, spec.registry, i)
            if spec.proc_policy:
                refusal = self.catalog.check_proc(node)
                if refusal:
                    self.invalid(nid, "input", refusal,
                                 "fix the proc input as the message says: argv[0] one of the "
                                 "allowed names (the proc capability's handshake metadata), env "
                                 "keys from "
                                 "proc_env_keys, no NUL bytes")
        for check in spec.checks:
            for found in check(node):
                self.invalid(nid, found.field, found.message, found.hint)
        for edge in row.own_edges:
            field = edge.field
            target = getattr(node, field)
            if target not in edge.keywords:
                self.targets[field][i] = self.resolve(i, field, target)

    def check_name(self, nid: str, name: str, what: str, index: int = -1) -> None:
        """``name`` is a registered ``what`` (``"tool"`` or ``"skill"``); a skill
        reference (``name`` or ``name@version``) is resolved by the catalog's
        ``resolve_skill`` when it has one (a deprecated version's warning is kept in
        :attr:`notices` for the node's ``start`` event)."""
        if what == "skill" and self.check_skill_ref(nid, name, index):
            return
        if name in (self.tool_names() if what == "tool" else self.skill_names()):
            if what == "tool":
                self.check_granted(nid, "name", name)
            return
        pack = self.pack_providing(name) if what == "tool" else None
        if pack:
            self.invalid(nid, "name", f"unknown tool {name!r}; it is in the {pack!r} "
                         "pack, which is not enabled",
                         f"enable it with --tools +{pack}, or name it in A2E_TOOLS or "
                         "the configuration file's tools")
            return
        listing = kind_table.LISTING_MESSAGE.get(what, "tool/list/req")
        self.invalid(nid, "name", f"unknown {what} {name!r}{self.suggest(name, what + 's')}",
                     f"use a registered {what} ({listing} lists them) or enable the pack "
                     "that provides it")

    def check_granted(self, nid: str, field: str, name: str) -> None:
        """A ``tool_denied`` problem when the session's principal has a tool grant that
        lacks the registered tool ``name`` (PROTOCOL.md §11 Tool grants)."""
        grant = self.tool_grant
        if grant is not None and not grant.allows(name, self.tool_pack(name)):
            message, hint = grant.refusal(name)
            self.add(problem(TOOL_DENIED, nid, field, message, hint, tool=name))

    def check_skill_ref(self, nid: str, ref: str, index: int) -> bool:
        """Resolve a skill reference through the catalog's ``resolve_skill``; False when
        the catalog has none (names are then checked as plain names)."""
        resolve = getattr(self.catalog, "resolve_skill", None)
        if resolve is None:
            return False
        found = resolve(ref)
        if found.entry is not None:
            if found.warning and index >= 0:
                self.notices[index] = {"warning": found.warning, "skill": found.name,
                                       "version": found.version,
                                       "lifecycle": found.lifecycle}
            return True
        suggestion = "" if found.known else self.suggest(found.name, "skills")
        self.invalid(nid, "name", f"{found.message}{suggestion}", found.hint)
        return True

    def pack_providing(self, name: str) -> str | None:
        """The catalog's not-enabled pack providing tool ``name``, when it can say."""
        lookup = getattr(self.catalog, "pack_providing", None)
        found = lookup(name) if lookup is not None else None
        return found if isinstance(found, str) and found else None

    def tool_pack(self, name: str) -> str:
        """The tool pack registered tool ``name`` came from, when the catalog can say
        (its optional ``pack_of``); ``""`` otherwise."""
        lookup = getattr(self.catalog, "pack_of", None)
        found = lookup(name) if lookup is not None else ""
        return found if isinstance(found, str) else ""

    def tool_names(self) -> Collection[str]:
        if self._tools is None:
            self._tools = self.catalog.tool_names() if self.catalog is not None else ()
        return self._tools

    def skill_names(self) -> Collection[str]:
        if self._skills is None:
            self._skills = self.catalog.skill_names() if self.catalog is not None else ()
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

    def compile_node(self, i: int, node: ChainNode, spec: KindSpec | None) -> None:
        if not self.compile_expressions:
            return
        nid = node.node_id
        pairs = []
        for key, text in node.input_map.items():
            expr = self.compile_one(nid, f"input_map.{key}", text)
            if expr is not None:
                pairs.append((key, expr))
        self.input_map[i] = tuple(pairs)
        if spec is None:
            return
        for field in spec.expressions:
            text = getattr(node, field)
            if text:
                self.exprs[field][i] = expr = self.compile_one(nid, field, text)
                if expr is not None and field == "items_path":
                    self.check_literal_items(nid, expr)

    def check_literal_items(self, nid: str, expr: Expression) -> None:
        if not expr.is_literal:
            return
        items = expr.literal
        if not isinstance(items, list):
            self.invalid(nid, "items_path", f"items_path is a literal that is not a list: "
                         f"{expr.text}", "give items_path a list, e.g. `[1, 2, 3]` or input.items")
            return
        if self.limits is None:
            return
        refused = self.limits.refusal("max_map_items", len(items), node_id=nid)
        if refused is not None:
            limit = refused.details["limit"]
            self.add_limit(refused, nid, "items_path", f"give the map at most {limit} items")

    # ── 4. templates ──

    def check_templates(self) -> None:
        users: dict[int, list[int]] = {}
        for m, t in enumerate(self.targets[MAP_NODE.field]):
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
            spec = self.kinds.get(tnode.kind)
            if spec is not None and not spec.executed:
                fit = one_of(self.kinds.template_kinds)
                self.invalid(mid, "map_node", f"map_node {tid!r} is a {tnode.kind} node; a "
                             f"template must be a {fit} node",
                             f"point map_node at a {fit} node")
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
