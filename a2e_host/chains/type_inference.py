"""The type of a JMESPath expression, inferred from what the context's fields hold.

Layer: core (pure: no I/O, no clock, no anyio). Used by :mod:`~a2e_host.chains.typecheck`.
Source: PROTOCOL.md §3 (expressions), §4 (static checks); DECISIONS.md (what is inferred).

Theory of operation. :func:`infer` walks a compiled expression's syntax tree once,
evaluating it over types instead of values, with jmespath's semantics as
:mod:`~a2e_host.chains.interpreter` runs them: a field of a non-object is null, an index out
of range is null, a projection drops nulls and is null over a non-list, ``a || b`` is ``a``
unless falsy … The context's root fields come from the caller (``<node>.output`` from the
node's output schema, ``item`` from its map's ``items_path``; ``input.*`` is unknown).

* What is not known is :data:`~a2e_host.chains.schema_types.ANY`, and stays so: a type is
  never guessed. Functions give their result types (``length`` an integer, ``to_string`` and
  ``join`` a string, ``keys`` a list of strings …); a function's argument errors are left to
  run time.
* Types are exact except for null: a node read may have been skipped or failed under
  ``on_error: skip`` (its output is then null), so callers treat a null the type lacks as
  possible.
* When a value is null for sure because a field was read where it cannot be (a field an
  object never has, a field of a string, an index into an object) the first such place is
  kept as :attr:`Inferred.note`, for the problem's message.
* Bounded: every visit and type operation spends :class:`~a2e_host.chains.schema_types.Fuel`
  (:data:`MAX_INFERENCE_STEPS` per expression); out of fuel, or deeper than
  :data:`_MAX_VISIT_DEPTH`, the expression's type is unknown.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .expressions import Expression
from .schema_types import (
    ALL,
    ANY,
    ARRAY,
    BOOLEAN,
    INTEGER,
    NEVER,
    NULL,
    NULL_TYPE,
    NUMBER,
    OBJECT,
    STRING,
    Fuel,
    OutOfFuel,
    SchemaType,
    array_of,
    join,
    object_of,
    only,
    scalar,
    type_of_value,
    without_null,
)
from .schema_words import describe

__all__ = ["MAX_INFERENCE_STEPS", "Inferred", "infer", "read_fields"]

NEVER_NULL_AT_ROOT = frozenset({"multi_select_list", "multi_select_hash", "literal"})
"""Expression roots whose value is never null over the chain context (which is never
null): no whole-expression null read can come from them, so they need no inference."""

MAX_INFERENCE_STEPS = 5_000
"""Steps (syntax-tree visits and type operations) one expression's inference may take."""

_MAX_VISIT_DEPTH = 256
_ROOT = SchemaType(OBJECT)  # the context itself: its fields come from the caller
_STRINGS = array_of(scalar(STRING))
_NUMBER_OR_NULL = scalar(NUMBER | NULL)
_BOOLEAN_OR_NULL = scalar(BOOLEAN | NULL)
_TYPE_NAMES = frozenset((STRING, name) for name in (
    "number", "string", "boolean", "array", "object", "null"))


@dataclass(frozen=True, slots=True)
class Inferred:
    """An expression's type.

    Attributes:
        type: the values it can give (null aside: see the module's notes).
        note: why it is null for sure, when a read could not find anything (``"there is
            no field 'txt' there (fields: bytes, path, text); did you mean 'text'?"``),
            else ``""``.
    """

    type: SchemaType
    note: str = ""


def infer(
    expr: Expression, root_field: Callable[[str], SchemaType], fuel: Fuel | None = None
) -> Inferred:
    """The type of ``expr`` evaluated against a context whose root field ``name`` holds
    ``root_field(name)``.

    Args:
        expr: a compiled expression.
        root_field: the type of a root field of the context (a node id, ``input``, ``item``
            …); return :data:`~a2e_host.chains.schema_types.ANY` for what is not known.
        fuel: what the inference may spend; None for :data:`MAX_INFERENCE_STEPS`. Shared
            fuel bounds a whole validation.

    Returns:
        The :class:`Inferred` type; ANY when the fuel ran out.
    """
    walker = _Walker(root_field, fuel if fuel is not None else Fuel(MAX_INFERENCE_STEPS))
    try:
        path = expr.path
        if path is not None:  # a plain dotted path: no tree to walk
            walker.fuel.spend(len(path))
            t = root_field(path[0])
            for name in path[1:]:
                t = walker.field(t, name)
            return Inferred(t, walker.note)
        return Inferred(walker.visit(expr.parsed, _ROOT, 0), walker.note)
    except OutOfFuel:
        return Inferred(ANY)


def read_fields(t: SchemaType, names: Sequence[str]) -> Inferred:
    """The type of ``v.a.b…`` (``names``) for a value ``v`` of type ``t``: the rest of a plain
    dotted path whose start is known (``read.output`` + ``text``)."""
    walker = _Walker(_no_root, Fuel(MAX_INFERENCE_STEPS))
    try:
        for name in names:
            t = walker.field(t, name)
    except OutOfFuel:
        return Inferred(ANY)
    return Inferred(t, walker.note)


def _no_root(name: str) -> SchemaType:
    return ANY


class _Walker:
    """One inference: the root fields, the fuel, and the first note."""

    __slots__ = ("root_field", "fuel", "note")

    def __init__(self, root_field: Callable[[str], SchemaType], fuel: Fuel) -> None:
        self.root_field = root_field
        self.fuel = fuel
        self.note = ""

    def noted(self, text: str) -> SchemaType:
        if not self.note:
            self.note = text
        return NULL_TYPE

    # ── reads ──

    def field(self, t: SchemaType, name: str) -> SchemaType:
        if t is _ROOT:
            return self.root_field(name)
        if t.kinds == ALL and t.props is None and t.extra is None:
            return ANY
        if not t.kinds & OBJECT:
            if t.kinds == NULL:
                return NULL_TYPE
            return self.noted(f"field {name!r} is read from {_a(describe(t, 0))}")
        found: SchemaType
        props = t.props
        if props is not None and name in props:
            found = props[name]
            if name not in t.required:
                found = join(found, NULL_TYPE, self.fuel)
        elif t.extra is NEVER:
            found = self.noted(_no_field(name, props or {}))
        elif t.extra is not None:
            found = join(t.extra, NULL_TYPE, self.fuel)
        else:
            found = ANY
        if t.kinds & ~OBJECT:
            found = join(found, NULL_TYPE, self.fuel)
        return found

    def index(self, t: SchemaType) -> SchemaType:
        if t.kinds == ALL:
            return ANY
        if not t.kinds & ARRAY:
            if t.kinds == NULL:
                return NULL_TYPE
            return self.noted(f"an index [n] is read from {_a(describe(t, 0))}")
        return join(t.items or ANY, NULL_TYPE, self.fuel)  # out of range: null

    # ── the tree ──

    def visit(self, node: dict[str, Any], cur: SchemaType, depth: int) -> SchemaType:
        self.fuel.spend()
        if depth > _MAX_VISIT_DEPTH:
            return ANY
        kind = node["type"]
        children = node["children"]
        deeper = depth + 1
        if kind == "field":
            return self.field(cur, node["value"])
        if kind in ("subexpression", "index_expression", "pipe"):
            for child in children:
                cur = self.visit(child, cur, deeper)
            return cur
        if kind in ("current", "identity"):
            return cur
        if kind == "literal":
            return type_of_value(node["value"], self.fuel)
        if kind == "index":
            return self.index(cur)
        if kind == "slice":
            return self.slice(cur)
        if kind in ("projection", "filter_projection"):
            return self.project(self.visit(children[0], cur, deeper), children[1], deeper)
        if kind == "value_projection":
            return self.project_values(self.visit(children[0], cur, deeper), children[1], deeper)
        if kind == "flatten":
            return self.flatten(self.visit(children[0], cur, deeper))
        if kind == "multi_select_list":
            items = NEVER
            for child in children:
                items = join(items, self.visit(child, cur, deeper), self.fuel)
            return self.nullable_like(cur, array_of(items if items is not NEVER else ANY))
        if kind == "multi_select_dict":
            props = {pair["value"]: self.visit(pair["children"][0], cur, deeper + 1)
                     for pair in children}
            return self.nullable_like(cur, object_of(props))
        if kind == "or_expression":
            left = self.visit(children[0], cur, deeper)
            right = self.visit(children[1], cur, deeper)
            return join(without_null(left), right, self.fuel)
        if kind == "and_expression":
            left = self.visit(children[0], cur, deeper)
            return join(left, self.visit(children[1], cur, deeper), self.fuel)
        if kind == "not_expression":
            return scalar(BOOLEAN)
        if kind == "comparator":
            return scalar(BOOLEAN) if node["value"] in ("eq", "ne") else _BOOLEAN_OR_NULL
        if kind == "function_expression":
            args = [self.visit(child, cur, deeper) for child in children]
            return self.call(node["value"], args)
        return ANY  # expref (a function's argument) and anything new

    def nullable_like(self, cur: SchemaType, t: SchemaType) -> SchemaType:
        """A multi-select over a null is null."""
        if cur is not _ROOT and cur.kinds & NULL and cur.kinds != ALL:
            return join(t, NULL_TYPE, self.fuel)
        return t

    def slice(self, t: SchemaType) -> SchemaType:
        if t.kinds == ALL:
            return ANY
        if not t.kinds & ARRAY:
            return NULL_TYPE
        part = array_of(t.items or ANY)
        return join(part, NULL_TYPE, self.fuel) if t.kinds & ~ARRAY else part

    def project(self, base: SchemaType, rhs: dict[str, Any], depth: int) -> SchemaType:
        if base.kinds == ALL:
            return ANY  # over an unknown value: unknown, not "a list or null"
        if not base.kinds & ARRAY:
            return NULL_TYPE
        elements = base.items or ANY
        result = array_of(without_null(self.visit(rhs, elements, depth)))
        return join(result, NULL_TYPE, self.fuel) if base.kinds & ~ARRAY else result

    def project_values(self, base: SchemaType, rhs: dict[str, Any], depth: int) -> SchemaType:
        if base.kinds == ALL:
            return ANY
        if not base.kinds & OBJECT:
            return NULL_TYPE
        elements = NEVER
        for t in (base.props or {}).values():
            elements = join(elements, t, self.fuel)
        if base.extra is not NEVER:
            elements = join(elements, base.extra or ANY, self.fuel)
        result = array_of(without_null(self.visit(rhs, elements, depth)))
        return join(result, NULL_TYPE, self.fuel) if base.kinds & ~OBJECT else result

    def flatten(self, base: SchemaType) -> SchemaType:
        if base.kinds == ALL:
            return ANY
        if not base.kinds & ARRAY:
            return NULL_TYPE
        items = base.items or ANY
        if items is not ANY and items.kinds & ARRAY:
            inner = items.items or ANY
            flat = only(items, ALL & ~ARRAY)
            items = join(flat, inner, self.fuel) if flat is not NEVER else inner
        result = array_of(items)
        return join(result, NULL_TYPE, self.fuel) if base.kinds & ~ARRAY else result

    # ── functions ──

    def call(self, name: str, args: list[SchemaType]) -> SchemaType:
        first = args[0] if args else ANY
        if name in ("length", "ceil", "floor"):
            return scalar(INTEGER)
        if name in ("to_string", "join"):
            return scalar(STRING)
        if name in ("contains", "starts_with", "ends_with"):
            return scalar(BOOLEAN)
        if name in ("avg", "to_number"):
            return _NUMBER_OR_NULL
        if name in ("sum", "abs"):
            numbers = first.kinds & NUMBER if name == "abs" and first.kinds != ALL else NUMBER
            return scalar(numbers or NUMBER)
        if name == "keys":
            return _STRINGS
        if name == "type":
            return SchemaType(STRING, values=_TYPE_NAMES)
        if name in ("max", "min", "max_by", "min_by"):
            return join(first.items or ANY, NULL_TYPE, self.fuel) \
                if first.kinds & ARRAY and first.kinds != ALL else ANY
        if name in ("sort", "sort_by"):
            return only(first, ARRAY) if first.kinds != ALL else scalar(ARRAY)
        if name == "reverse":
            return only(first, ARRAY | STRING) if first.kinds != ALL else scalar(ARRAY | STRING)
        if name == "not_null":
            found = NEVER
            for arg in args:
                found = join(found, arg, self.fuel)
            return found if found is not NEVER else ANY
        if name == "to_array":
            if first.kinds == ALL:
                return scalar(ARRAY)
            if first.kinds == ARRAY:
                return first
            return join(only(first, ARRAY), array_of(only(first, ALL & ~ARRAY)), self.fuel)
        if name in ("map", "values"):
            return scalar(ARRAY)
        if name == "merge":
            return scalar(OBJECT)
        return ANY


def _a(noun: str) -> str:
    return ("an " if noun[:1] in "aeiou" else "a ") + noun


def _no_field(name: str, props: dict[str, SchemaType] | Any) -> str:
    names = sorted(props)
    if not names:
        return f"there is no field {name!r} there (an empty object)"
    listed = ", ".join(names[:8]) + (", …" if len(names) > 8 else "")
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6) if len(names) <= 256 else []
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"there is no field {name!r} there (fields: {listed}){hint}"
