"""Chain validation: a ``chain/req`` in, an immutable :class:`ChainPlan` (or every problem) out.

Layer: core (no I/O, no clock, no anyio). Source: PROTOCOL.md §3 (expressions), §4 (the
graph and validation), §5 (kinds, terminal nodes), §6 (ceilings), §8 (code precedence).

Theory of operation (the steps, and the module that takes each):

1. Chain-level checks (here): ``nodes`` not empty, ``max_nodes``,
   ``max_chain_expression_chars``, ``timeout`` > 0 and within ``max_timeout``.
2. Node ids are indexed (:mod:`~a2e_host.chains.node_checks`).
3. Each node is checked on its own, as its kind's row of the kind table
   (:mod:`~a2e_host.chains.kinds`) says: gate, required fields, names, own fields, control
   edge references, expressions (:mod:`~a2e_host.chains.node_checks`).
4. Map templates (:mod:`~a2e_host.chains.node_checks`).
5. Edges, 6. cycles, 7. the entry node (:mod:`~a2e_host.chains.graph_checks`); literal
   ``items_path`` lists are held to ``max_map_items`` in step 3.

Between steps 5 and 6, the static checks (:mod:`~a2e_host.chains.typecheck`): node inputs
against the tools' and skills' schemas, with the types of ``input_map`` expressions
inferred from the outputs they read. A sure failure is a problem; what could be wrong is a
warning, kept on the plan (:attr:`ChainPlan.warnings`).

Validation is near-linear in the size of the request, also when it is hostile:
expressions are bounded in length and nesting before they are parsed
(:data:`~a2e_host.chains.expressions.MAX_EXPRESSION_NESTING`), every walk is iterative, and
"did you mean" suggestions are bounded (:mod:`~a2e_host.chains.hints`; every problem is
still counted), and so are the problems kept (:class:`~a2e_host.chains.problems.Problems`).

Problems and their one exception are described in :mod:`~a2e_host.chains.problems`: all of
them are raised together in one :class:`~a2e_host.exceptions.ChainInvalid` whose code
follows the precedence ``chain_cycle`` > ``chain_limit`` > ``chain_invalid``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..exceptions import ChainInvalid
from ..grants import ToolGrant
from ..limits import SessionLimits
from .catalog import Catalog
from .expressions import MAX_EXPRESSION_NESTING, Expression
from .graph_checks import DeclaredEdge, GraphChecks
from .kinds import MAP_NODE, EdgeKind
from .messages import ChainNode, ChainRequest
from .node_checks import CONTEXT_KEYS, RESERVED_IDS
from .problems import CHAIN_INVALID, chain_invalid, problem
from .recovery_checks import check_recovery
from .recovery_policy import Recovery, recovery_of
from .secret_refs import secret_problems
from .typecheck import TypeChecks

__all__ = [
    "Catalog",
    "ChainPlan",
    "DeclaredEdge",
    "EdgeKind",
    "PlanNode",
    "CONTEXT_KEYS",
    "RESERVED_IDS",
    "declared_edges",
    "expression_chars",
    "validate_chain",
]


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
        recovery: its retry, timeout, fallback and cache (PROTOCOL.md §5 Recovery), None
            when it asks for none.
        notice: the ``data`` of its ``start`` event when there is something to say (a
            deprecated skill version: ``{warning, skill, version, lifecycle}``), else
            None (``data`` stays ``{}``).
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
    recovery: Recovery | None = None
    notice: dict[str, Any] | None = None


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
        warnings: what the static checks found could fail at run time (problems of code
            ``chain_warning``, PROTOCOL.md §4); never sent with a running chain.
    """

    request: ChainRequest
    nodes: tuple[PlanNode, ...]
    by_id: Mapping[str, int]
    roots: tuple[int, ...]
    terminals: tuple[int, ...]
    entry: int
    timeout: float
    warnings: tuple[dict[str, Any], ...] = ()


def validate_chain(
    request: ChainRequest, catalog: Catalog, limits: SessionLimits, *, granted: frozenset[str],
    tool_grant: ToolGrant | None = None,
) -> ChainPlan:
    """Validate a chain and build its plan (PROTOCOL.md §4, §6).

    Args:
        request: the decoded ``chain/req``.
        catalog: the host's tools, skills and proc policy.
        limits: the session's effective ceilings.
        granted: capabilities granted to the session (``skill`` and ``proc`` nodes need
            theirs).
        tool_grant: the tools the session's principal may name; a ``tool`` node or a
            ``fallback`` naming another registered tool is a problem of code
            ``tool_denied`` (the refusal's code stays ``chain_invalid``). None: every tool
            (PROTOCOL.md §11 Tool grants).

    Returns:
        The immutable :class:`ChainPlan` (its ``warnings`` list what could fail).

    Raises:
        ChainInvalid: one or more problems; ``details["errors"]`` lists them (the first
            :data:`~a2e_host.chains.problems.MAX_PROBLEMS`; past that
            ``details["problems_total"]`` counts them all; ``details["warnings"]`` the
            warnings, when there are any), and
            ``code`` is ``chain_cycle``, else ``chain_limit``, else ``chain_invalid``.
            When the code is ``chain_limit``, the first problem's ``ceiling``, ``scope``,
            ``limit`` and ``requested`` are also at the top of ``details``.
    """
    try:
        validator = _Validator(request, catalog, limits, granted)
        validator.tool_grant = tool_grant
        return validator.run()
    except RecursionError:  # a last resort: every walk here is meant to be iterative
        message = ("the chain nests too deeply to validate (an expression or a value inside "
                   "one is nested beyond what the host can walk)")
        found = problem(CHAIN_INVALID, "", "nodes", message,
                        f"keep expressions within {MAX_EXPRESSION_NESTING} levels of "
                        "nesting and split deep structures over several nodes")
        raise ChainInvalid(f"chain is invalid (1 problem); first: {message}",
                           details={"errors": [found]}) from None


def declared_edges(nodes: Iterable[ChainNode]) -> tuple[DeclaredEdge, ...]:
    """The edges a chain's declaration names, as validation reads them (PROTOCOL.md §4).

    What ``a2e-host graph`` draws. Only the reading is done: nothing is asked of a host
    (names, proc policy, gates, ceilings), and nothing is refused.

    Args:
        nodes: the chain's nodes, valid or not.

    Returns:
        Control edges first, node by node in declaration order and each node's in its
        kind's edge order (:data:`~a2e_host.chains.kinds.NODE_KINDS`); then one data edge
        per (node read, node reading), by reading node, then by the id read. A reference
        to an undeclared id, a field the node's kind does not take, an expression that
        does not compile and a duplicate declaration give no edge. The template rules do
        not apply: a template's own edges, edges into it and its reads are listed.
    """
    reader = GraphChecks(ChainRequest(nodes=list(nodes)), None, None, None, keep_reads=True)
    reader.index_ids()
    for i in range(len(reader.nodes)):
        if reader.is_own(i):
            reader.check_node(i)
    reader.build_data_edges()
    return reader.declared_edges()


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


class _Validator(GraphChecks):
    """One validation run: every step's problems, then the plan if there are none."""

    def __init__(
        self, request: ChainRequest, catalog: Catalog, limits: SessionLimits,
        granted: frozenset[str],
    ) -> None:
        super().__init__(request, catalog, limits, granted)
        self.session_limits = limits

    # 1. the chain as a whole

    def check_chain(self) -> None:
        req = self.request
        if not self.nodes:
            self.invalid("", "nodes", "the chain declares no nodes",
                         "add at least one node to 'nodes'")
        refused = self.session_limits.refusal("max_nodes", len(self.nodes))
        if refused is not None:
            self.add_limit(refused, "", "nodes", "split the work into smaller chains")
        chars = expression_chars(self.nodes)
        refused = self.session_limits.refusal("max_chain_expression_chars", chars)
        if refused is not None:
            # compiling that much text is the cost the ceiling exists to avoid
            self.compile_expressions = False
            self.add_limit(refused, "", "nodes",
                           "move work into tools or skills, or split the chain")
        timeout = req.timeout_within(self.session_limits.effective.max_timeout)
        if timeout <= 0:
            self.invalid("", "timeout", f"timeout must be positive seconds, got {timeout}",
                         "set 'timeout' to a number of seconds above 0, or leave it out "
                         "for min(300, max_timeout)")
        else:
            refused = self.session_limits.refusal("max_timeout", timeout)
            if refused is not None:
                limit = refused.details["limit"]
                self.add_limit(refused, "", "timeout", f"set 'timeout' to at most {limit} seconds")

    # the steps in order

    def run(self) -> ChainPlan:
        self.check_chain()
        self.index_ids()
        for i in range(len(self.nodes)):
            if self.is_own(i):
                self.check_node(i)
        check_recovery(self)
        for found in secret_problems(self.request, getattr(self.catalog, "secrets", None),
                                     self.session_limits):
            self.problems.add(found)
        self.check_templates()
        self.build_control_edges()
        self.build_data_edges()
        warnings = TypeChecks(self).run()
        self.check_cycles()
        preds, control = self.count_preds()
        entry = self.check_entry(preds)
        if self.problems or entry is None:
            raise chain_invalid(self.problems, warnings)
        return self.plan(preds, control, entry, warnings)

    def plan(self, preds: list[int], control: list[bool], entry: int,
             warnings: list[dict[str, Any]]) -> ChainPlan:
        nodes = []
        condition, items_path = self.exprs.get("condition"), self.exprs.get("items_path")
        next_i, true_i, false_i, handler_i, template_i = (
            self.targets[field] for field in (
                "next_node", "true_node", "false_node", "on_error", MAP_NODE.field))
        for i, node in enumerate(self.nodes):
            out = tuple(sorted(self.out[i].items()))
            template = self.is_template(i)
            nodes.append(PlanNode(
                index=i, node=node, node_id=node.node_id, kind=node.kind,
                input_map=self.input_map[i], condition=condition[i] if condition else None,
                items_path=items_path[i] if items_path else None, next_index=next_i[i],
                true_index=true_i[i], false_index=false_i[i],
                on_error=self.on_error[i], handler_index=handler_i[i],
                template_index=template_i[i], template_of=self.template_of[i],
                out_edges=out, pred_count=preds[i], has_control_preds=control[i],
                terminal=not out and not template,
                recovery=recovery_of(node, self.request.cache),
                notice=self.notices.get(i),
            ))
        roots = tuple(p.index for p in nodes if p.pred_count == 0 and p.template_of is None)
        terminals = tuple(p.index for p in nodes if p.terminal)
        max_timeout = self.session_limits.effective.max_timeout
        return ChainPlan(
            request=self.request, nodes=tuple(nodes), by_id=MappingProxyType(dict(self.by_id)),
            roots=roots, terminals=terminals, entry=entry,
            timeout=float(min(self.request.timeout_within(max_timeout), max_timeout)),
            warnings=tuple(warnings),
        )


