"""Static checks of node inputs against tool and skill schemas: failures found before a node runs.

Layer: core (pure: no I/O, no clock, no anyio). A step of
:func:`~a2e_host.chains.validation.validate_chain`, after the expressions are compiled and
the ids indexed. Source: PROTOCOL.md §4 (static checks), DECISIONS.md (what is inferred).

Theory of operation. For each ``tool`` and ``skill`` node whose catalog entry declares a
:class:`~a2e_host.chains.catalog.Signature`, the node's resolved input (static ``input``,
then ``input_map``, PROTOCOL.md §3) is held to the input schema:

* every ``required`` field is given (by ``input`` or ``input_map``);
* no field is unknown (a key close to a missing required one is reported as that typo,
  with "did you mean");
* each static value fits its field exactly
  (:func:`~a2e_host.chains.schema_fit.check_value`);
* each ``input_map`` expression's inferred type
  (:func:`~a2e_host.chains.type_inference.infer`, from the output schemas of the nodes it
  reads) fits its field (:func:`~a2e_host.chains.schema_fit.fit`).

A map's ``items_path`` must be able to give a list, and a template's ``item`` is typed by
it. A ``tool`` node's ``fallback`` gets the same input checks against its own schema
(findings at field ``fallback``), and the node's output is typed as either tool's
(:mod:`~a2e_host.chains.fallback_checks`). A finding is an **error** (a ``chain_invalid``
problem) only when the node would fail for sure — the host enforces that part of the
schema and no value the expression can give would pass; what only *could* fail is a
**warning** (code ``chain_warning``), which does not refuse the chain. What cannot be
inferred (``input.*``, ``output``, a tool without an output schema, a function's argument
errors) is left to run time.

Bounded: each expression's inference and each value check spends its own fuel, and the
whole validation :data:`MAX_CHECK_STEPS`; past it, the remaining checks are left to run
time. Schema types are cached per schema (:func:`~a2e_host.chains.schema_types.schema_type`)
and per validation per tool.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import Any

from .catalog import Signature
from .expressions import Expression, clip
from .fallback_checks import FALLBACK, Fallbacks, fallback_hint
from .hints import MAX_SUGGESTIONS
from .kinds import MAP_NODE
from .messages import ChainNode
from .node_checks import NodeChecks
from .problems import CHAIN_INVALID, CHAIN_WARNING, problem
from .schema_fit import NEVER_FITS, Misfit, check_value, fit
from .schema_types import (
    ALL,
    ANY,
    ARRAY,
    INTEGER,
    NEVER,
    NULL,
    NULL_TYPE,
    OBJECT,
    STRING,
    Fuel,
    OutOfFuel,
    SchemaType,
    array_of,
    join,
    may_be_a_tag,
    object_of,
    scalar,
    schema_type,
)
from .schema_words import describe
from .static_messages import (
    FIX_THE_PATH,
    a_,
    convert_hint,
    did_you_mean,
    listed,
    mapped_message,
    static_value_message,
)
from .tool_facts import ToolFacts, facts_of_signature
from .type_inference import MAX_INFERENCE_STEPS, NEVER_NULL_AT_ROOT, Inferred, infer, read_fields

__all__ = ["MAX_CHECK_STEPS", "MAX_WARNINGS", "TypeChecks"]

MAX_CHECK_STEPS = 100_000
"""Steps the static checks of one validation may take in all (about 0.1 s of CPU at worst);
then the rest is left to run time. Plain paths into outputs (``read.output.text``) take none,
so a chain of 10,000 such nodes takes a few dozen."""

MAX_WARNINGS = 100
"""Warnings one validation keeps; later ones are dropped (errors are all reported)."""

_VALUE_STEPS = 5_000  # per static input value (elements looked at) or fit
_UNREAD: Any = object()
_ITEMS_PATH = "items_path"  # a map's list: it must be able to give one
_STATUS = SchemaType(STRING, values=frozenset(
    (STRING, status) for status in ("done", "skip", "error")))


class TypeChecks:
    """The static type checks of one validation run.

    Args:
        checks: the validation's node steps, done (ids indexed, expressions compiled).

    Attributes:
        warnings: the warnings found, in node order.
    """

    def __init__(self, checks: NodeChecks) -> None:
        self.v = checks
        catalog = checks.catalog
        self.signature_of: Callable[[str, str], Signature | None] | None = (
            getattr(catalog, "signature_of", None) if catalog is not None else None)
        self.warnings: list[dict[str, Any]] = []
        self.fuel = Fuel(MAX_CHECK_STEPS)
        self._facts: dict[tuple[str, str], ToolFacts | None] = {}
        self._outputs: dict[int, SchemaType] = {}
        self._node_types: dict[int, SchemaType] = {}
        self._items: dict[int, SchemaType] = {}
        self._fits: dict[tuple[SchemaType, SchemaType], Misfit | None] = {}
        self._suggested = 0
        self.fallbacks = Fallbacks(self.facts_of, self.fuel)
        self._in_fallback = False  # checking a fallback's input: findings at ``fallback``

    def run(self) -> list[dict[str, Any]]:
        """Check every node; errors are added to the validation's problems.

        Returns:
            The warnings.
        """
        if self.signature_of is None or not self.v.compile_expressions:
            return self.warnings
        by_id = self.v.by_id
        input_maps = self.v.input_map
        known = self._facts
        specs = self.v.kinds.specs
        try:
            for i, node in enumerate(self.v.nodes):
                if by_id.get(node.node_id) != i:
                    continue  # a duplicate declaration (reported already)
                spec = specs.get(node.kind)
                if spec is None:
                    continue  # an unknown kind (reported already)
                registry = spec.registry
                if registry is not None:
                    facts = known.get((registry, node.name), _UNREAD)
                    if facts is _UNREAD:
                        facts = self.facts_of(registry, node.name)
                    if node.fallback and FALLBACK in spec.own_fields:
                        self.check_fallback_input(i, node, input_maps[i])
                    if facts is not None and facts.checks_fields:
                        self.check_input(i, node, facts, input_maps[i])
                        continue
                for field in spec.expressions:
                    self.check_own_expression(i, node, field)
                for key, expr in input_maps[i]:
                    self.check_null_read(i, node, key, expr)
        except OutOfFuel:
            pass  # the rest is left to run time
        return self.warnings

    # ── findings ──

    def report(self, error: bool, nid: str, field: str, message: str, hint: str,
               **extra: Any) -> None:
        if self._in_fallback:
            field, hint = FALLBACK, fallback_hint(hint)
        if error:
            self.v.add(problem(CHAIN_INVALID, nid, field, message, hint, **extra))
        elif len(self.warnings) < MAX_WARNINGS:
            self.warnings.append(problem(CHAIN_WARNING, nid, field, message, hint, **extra))

    def closest(self, word: str, names: Iterable[str]) -> str | None:
        """The name closest to ``word``; at most :data:`MAX_SUGGESTIONS` lookups."""
        if self._suggested >= MAX_SUGGESTIONS:
            return None
        self._suggested += 1
        found = difflib.get_close_matches(word, list(names)[:256], n=1, cutoff=0.6)
        return found[0] if found else None

    # ── what the catalog and the graph say ──

    def facts_of(self, kind: str, name: str) -> ToolFacts | None:
        key = (kind, name)
        if key in self._facts:
            return self._facts[key]
        sig = self.signature_of(kind, name) if self.signature_of is not None else None
        facts = facts_of_signature(f"{kind} {name!r}", sig) if sig is not None else None
        self._facts[key] = facts
        return facts

    def output_of(self, j: int) -> SchemaType:
        """The type of node ``j``'s output when it is done: what its tool or skill declares,
        what the host builds for its kind (the kind table's ``output``), or a map's list of
        its template's outputs."""
        found = self._outputs.get(j)
        if found is not None:
            return found
        node = self.v.nodes[j]
        spec = self.v.kinds.specs.get(node.kind)
        out = ANY
        if spec is None:
            pass
        elif spec.registry is not None:
            facts = self.facts_of(spec.registry, node.name)
            out = facts.output if facts is not None else ANY
            if node.fallback and FALLBACK in spec.own_fields:  # either tool's output
                out = self.fallbacks.output(out, node.name, node.fallback)
        elif spec.output is not None:
            out = schema_type(spec.output, closed=True)
        elif MAP_NODE in spec.edges:
            t = self.v.targets[MAP_NODE.field][j]
            template = self.v.kinds.specs.get(self.v.nodes[t].kind) if t is not None else None
            out = array_of(ANY)
            if t is not None and template is not None and template.executed:
                item = self.output_of(t)
                if self.v.on_error[t] == "skip":  # a failed item is a null in the list
                    item = join(item, NULL_TYPE, self.fuel)
                out = array_of(item)
        self._outputs[j] = out
        return out

    def node_type(self, j: int) -> SchemaType:
        """The type of ``<node_id>`` in the context: ``{output, status}``."""
        found = self._node_types.get(j)
        if found is None:
            found = self._node_types[j] = object_of(
                {"output": self.output_of(j), "status": _STATUS})
        return found

    def items_of(self, m: int) -> SchemaType:
        """The type of one item of map ``m`` (from its ``items_path``)."""
        found = self._items.get(m)
        if found is not None:
            return found
        expr = self.v.exprs[_ITEMS_PATH][m]
        item = ANY
        if expr is not None:
            t = self.infer(expr, m).type
            if t.kinds & ARRAY and t is not ANY:
                item = t.items or ANY
        self._items[m] = item
        return item

    def root_of(self, i: int) -> Callable[[str], SchemaType]:
        """The types of node ``i``'s context fields (PROTOCOL.md §3)."""
        by_id = self.v.by_id
        owner = self.v.template_of[i]

        def root_field(name: str) -> SchemaType:
            j = by_id.get(name)
            if j is not None:
                return self.node_type(j)
            if owner is not None:
                if name in ("item", "_item"):
                    return self.items_of(owner)
                if name == "index":
                    return scalar(INTEGER)
            return ANY

        return root_field

    def read(self, expr: Expression) -> SchemaType | None:
        """The type of ``<node>.output.a.b`` (the most common expression) straight from the
        node's output type, when every field on the way is one the object always has;
        else None (:meth:`infer` then)."""
        path = expr.path
        if path is None or len(path) < 2 or path[1] != "output":
            return None
        j = self.v.by_id.get(path[0])
        if j is None:
            return None
        t = self._outputs.get(j) or self.output_of(j)
        for k in range(2, len(path)):
            name = path[k]
            props = t.props
            if t.kinds != OBJECT or props is None or name not in t.required \
                    or name not in props:
                return None
            t = props[name]
        return t

    def infer(self, expr: Expression, i: int) -> Inferred:
        """The type of ``expr`` in node ``i``'s context."""
        path = expr.path
        if path is not None and len(path) >= 2 and path[1] == "output":
            j = self.v.by_id.get(path[0])
            if j is not None:  # from the node's output type, without a walk of the root
                self.fuel.spend(len(path))
                return read_fields(self._outputs.get(j) or self.output_of(j), path[2:])
        steps = min(MAX_INFERENCE_STEPS, self.fuel.left)
        fuel = Fuel(steps)
        found = infer(expr, self.root_of(i), fuel)
        self.fuel.spend(steps - max(fuel.left, 0) + 1)
        return found

    # ── one node ──

    def check_input(self, i: int, node: ChainNode, facts: ToolFacts,
                    pairs: tuple[tuple[str, Expression], ...]) -> None:
        """A tool or skill node's input against its schema (hot: every typed node)."""
        static, mapped = node.input, node.input_map
        given = static.keys() | mapped.keys()
        if not (facts.fields >= given and facts.input.required <= given):
            self.check_fields(i, node, facts)
        props = facts.props
        extra = facts.input.extra
        for key, value in static.items():
            sub = props.get(key, extra)
            if key not in mapped and sub is not None and sub is not NEVER:
                self.check_static(node, key, value, sub, facts)
        for key, expr in pairs:
            sub = props.get(key, extra)
            if sub is not None and sub is not ANY and sub is not NEVER:
                self.check_mapped(i, node, key, expr, sub, facts)
                continue
            path = expr.path  # a node's whole output or a read from input: never noted
            if path is None or not (len(path) == 1 or path[0] == "input"
                                    or (len(path) == 2 and path[1] == "output")):
                self.check_null_read(i, node, key, expr)

    def check_fallback_input(self, i: int, node: ChainNode,
                             pairs: tuple[tuple[str, Expression], ...]) -> None:
        """The node's input against its fallback tool's schema (PROTOCOL.md §5: the
        fallback runs with the same resolved input, held to its own schema)."""
        if node.fallback == node.name:
            return  # refused already
        facts = self.fallbacks.facts(node.fallback)
        if facts is None or not facts.checks_fields:
            return
        self._in_fallback = True
        try:
            self.check_input(i, node, facts, pairs)
        finally:
            self._in_fallback = False

    def check_fields(self, i: int, node: ChainNode, facts: ToolFacts) -> None:
        """Required fields given, no unknown field (a typo of a missing one said so)."""
        want = facts.input
        static, mapped = node.input, node.input_map
        props = facts.props
        missing = sorted(r for r in want.required if r not in static and r not in mapped)
        if not missing and want.extra is not NEVER and len(self.warnings) >= MAX_WARNINGS:
            return  # only warnings could follow, and no more are kept
        nid = node.node_id
        label = facts.label
        unknown = [k for k in (*static, *(k for k in mapped if k not in static))
                   if k not in props]
        for key in unknown:
            field = f"input_map.{key}" if key in mapped else f"input.{key}"
            close = self.closest(key, missing) if missing else None
            if close is not None:
                missing.remove(close)
                sure = facts.required_enforced and not may_be_a_tag(props.get(close))
                self.report(sure, nid, field,
                            f"{label} has no input field {key!r}; did you mean {close!r}? "
                            f"({close!r} is required and nothing gives it)",
                            f"rename {key!r} to {close!r}",
                            expected=describe(props.get(close, ANY)), inferred="nothing")
                continue
            if want.extra is NEVER:
                close = self.closest(key, facts.names)
                self.report(facts.types_enforced, nid, field,
                            f"{label} refuses unknown input fields and has no field {key!r}"
                            f"{did_you_mean(close)}",
                            f"rename it to {close!r}" if close else
                            f"remove it; the fields are: {listed(facts.names)}")
            elif want.extra is None and facts.names and len(self.warnings) < MAX_WARNINGS:
                close = self.closest(key, facts.names)
                fate = "it is ignored" if facts.types_enforced else "it may be ignored"
                self.report(False, nid, field,
                            f"{label} declares no input field {key!r}, so {fate}"
                            f"{did_you_mean(close)}",
                            f"rename it to {close!r}" if close else
                            f"remove it; the fields are: {listed(facts.names)}")
        for name in missing:
            expected = describe(props.get(name, ANY))
            sure = facts.required_enforced and not may_be_a_tag(props.get(name))
            self.report(sure, nid, f"input.{name}",
                        f"{label} requires input field {name!r}, which neither input nor "
                        "input_map gives",
                        f"add {name!r} to input ({a_(expected)}) or to input_map (an "
                        "expression giving one)", expected=expected, inferred="nothing")

    def check_static(self, node: ChainNode, key: str, value: Any, want: SchemaType,
                     facts: ToolFacts) -> None:
        steps = min(_VALUE_STEPS, self.fuel.left)
        fuel = Fuel(steps)
        try:
            found = check_value(value, want, fuel)
        except OutOfFuel:
            return
        finally:
            self.fuel.spend(steps - max(fuel.left, 0) + 1)
        if found is None:
            return
        message, hint = static_value_message(key, facts.label, found)
        self.report(facts.types_enforced, node.node_id, f"input.{key}", message, hint,
                    expected=found.expected, inferred=found.got)

    def check_mapped(self, i: int, node: ChainNode, key: str, expr: Expression,
                     want: SchemaType, facts: ToolFacts) -> None:
        t = self.read(expr)
        got = None
        if t is None:
            got = self.infer(expr, i)
            t = got.type
        known = self._fits.get((t, want), _UNREAD)  # types hash by identity
        if known is not _UNREAD:
            found = known
        else:
            steps = min(_VALUE_STEPS, self.fuel.left)
            fuel = Fuel(steps)
            try:
                found = fit(t, want, fuel)
            except OutOfFuel:
                return
            finally:
                self.fuel.spend(steps - max(fuel.left, 0) + 1)
            self._fits[(t, want)] = found
        if got is None:
            if found is None:
                return
            got = Inferred(t)
        if found is None:
            if got.note and got.type is NULL_TYPE:
                self.check_null_read(i, node, key, expr, got)
            return
        error = found.verdict == NEVER_FITS
        said = None if error else self.one_sided(key, expr, want, facts)
        message, hint = said or (
            mapped_message(key, facts.label, expr.text, found,
                           got.note if got.type is NULL_TYPE else "", error),
            convert_hint(found, want, bool(got.note) and got.type is NULL_TYPE))
        self.report(error and facts.types_enforced, node.node_id, f"input_map.{key}",
                    message, hint, expected=found.expected, inferred=found.got)

    def one_sided(self, key: str, expr: Expression, want: SchemaType,
                  facts: ToolFacts) -> tuple[str, str] | None:
        """The words of a read that fits from one of a node's tool and its fallback only."""
        path = expr.path
        if path is None or len(path) < 3 or path[1] != "output":
            return None
        j = self.v.by_id.get(path[0])
        reader = self.v.nodes[j] if j is not None else None
        if reader is None or not reader.fallback:
            return None
        spec = self.v.kinds.specs.get(reader.kind)
        if spec is None or FALLBACK not in spec.own_fields:
            return None
        return self.fallbacks.one_sided(key, facts.label, expr.text, reader.node_id,
                                        reader.name, reader.fallback, path[2:], want)

    def check_null_read(self, i: int, node: ChainNode, key: str, expr: Expression,
                        got: Inferred | None = None, *, field: str = "") -> None:
        """A warning when ``expr`` (at ``input_map.<key>``, or the node's own ``field``) is
        always null because it reads where there is nothing (once: not again for the
        fallback's input)."""
        if self._in_fallback or (got is None and expr.parsed["type"] in NEVER_NULL_AT_ROOT):
            return  # in the fallback: told once; a list, object or literal is never null
        got = got or self.infer(expr, i)
        if got.note and got.type is NULL_TYPE:
            where = field or f"input_map.{key}"
            self.report(False, node.node_id, where,
                        f"{where} {clip(expr.text)} is always null: {got.note}",
                        FIX_THE_PATH, expected="any", inferred="null")

    def check_own_expression(self, i: int, node: ChainNode, field: str) -> None:
        """A kind's own expression field: ``items_path`` must be able to give a list, a
        ``condition`` that is always null is a warning."""
        expr = self.v.exprs[field][i]
        if expr is None:
            return
        if field == _ITEMS_PATH:
            self.check_items_path(i, node, expr)
        else:
            self.check_null_read(i, node, field, expr, field=field)

    def check_items_path(self, i: int, node: ChainNode, expr: Expression) -> None:
        if expr.is_literal:  # a literal list is checked with the node's fields
            return
        got = self.infer(expr, i)
        t = got.type
        if t.kinds == 0 or t.kinds == ALL:
            return
        shown = f"is always null: {got.note}" if got.note and t is NULL_TYPE \
            else f"is {a_(describe(t))}"
        hint = ("point items_path at a list (e.g. read.output.lines), or wrap the value in "
                "to_array(...)")
        if not t.kinds & ARRAY:
            self.report(True, node.node_id, "items_path", f"items_path {clip(expr.text)} "
                        f"{shown}, never a list; a map needs a list", hint,
                        expected="array", inferred=describe(t))
        elif t.kinds & ~(ARRAY | NULL):
            self.report(False, node.node_id, "items_path", f"items_path {clip(expr.text)} "
                        f"may be {a_(describe(t))}; a map needs a list", hint,
                        expected="array", inferred=describe(t))

