"""A small lattice of JSON value types, read from JSON Schemas, for checking chains statically.

Layer: core (pure: no I/O, no clock, no anyio). Used by :mod:`~a2e_host.chains.typecheck`;
the fit of one type into another is in :mod:`~a2e_host.chains.schema_fit`. Source:
PROTOCOL.md §4 (static checks), DECISIONS.md (what is inferred).

Theory of operation. Validation compares the *type* a node's input field will get (from an
upstream tool's output schema, through a JMESPath expression) with the type the tool's input
schema accepts: schemas against schemas, not instances, so an instance validator
(``jsonschema``) does not apply. A :class:`SchemaType` is a set of JSON kinds (a bit mask:
null, boolean, integer, float, string, array, object) with, for arrays, the elements' type
and, for objects, the declared properties, which of them are required and the type of any
other property. The kinds follow msgspec, which converts tool inputs and outputs: an
integer is never a float (``1.0`` is not an ``int``), a number is either, a boolean is not a
number.

* :func:`schema_type` reads a JSON Schema (``type``, ``enum``/``const``, ``properties``,
  ``required``, ``additionalProperties``, ``items``/``prefixItems``, ``$ref`` into
  ``$defs``, ``anyOf``/``oneOf``; ``allOf`` as its first member; bounds such as
  ``minimum``/``maxLength``). Whatever it does not read widens the type (any schema it
  cannot follow is :data:`ANY`), so a finding is never made of a keyword it skipped.
  Results are cached by schema identity: a tool's schema is read once per process.
* :func:`join` is the union of two types (least upper bound, widened where exact unions
  would be large); :func:`type_of_value` is the type of a literal.
* **Bounds.** Every walk is bounded: a schema is read to :data:`MAX_DEPTH` levels and
  :data:`MAX_SCHEMA_NODES` sub-schemas (beyond: :data:`ANY`); a type never nests deeper than
  :data:`MAX_DEPTH`; every operation spends :class:`Fuel`, and running out of it makes the
  caller give up (the value is then left to run time).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ALL",
    "ANY",
    "ARRAY",
    "BOOLEAN",
    "FLOAT",
    "INTEGER",
    "MAX_DEPTH",
    "MAX_SCHEMA_NODES",
    "NEVER",
    "NULL",
    "NULL_TYPE",
    "NUMBER",
    "OBJECT",
    "STRING",
    "Fuel",
    "OutOfFuel",
    "SchemaType",
    "array_of",
    "join",
    "kind_of",
    "may_be_a_tag",
    "object_of",
    "only",
    "scalar",
    "schema_type",
    "type_of_value",
    "without_null",
]

NULL, BOOLEAN, INTEGER, FLOAT, STRING, ARRAY, OBJECT = 1, 2, 4, 8, 16, 32, 64
NUMBER = INTEGER | FLOAT
ALL = 127

MAX_DEPTH = 24
"""Levels a type nests (and a schema is read); deeper parts are :data:`ANY`."""

MAX_SCHEMA_NODES = 4096
"""Sub-schemas one schema is read through; a larger schema reads as :data:`ANY`."""

_LITERAL_ELEMENTS = 256  # elements / keys of a literal whose types are joined; more: any
_CACHE_SIZE = 1024
_BOUND_KEYWORDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                   "minLength", "maxLength", "minItems", "maxItems",
                   "minProperties", "maxProperties")
_TYPE_NAMES = {"null": NULL, "boolean": BOOLEAN, "integer": INTEGER, "number": NUMBER,
               "string": STRING, "array": ARRAY, "object": OBJECT}


class OutOfFuel(Exception):
    """An inference or check spent its :class:`Fuel`; what it was finding is left to run
    time."""


class Fuel:
    """Steps one check may take (each schema node, type node, element looked at is one).

    Args:
        steps: the allowance.
    """

    __slots__ = ("left",)

    def __init__(self, steps: int) -> None:
        self.left = steps

    def spend(self, steps: int = 1) -> None:
        """Take ``steps``; raises :class:`OutOfFuel` when the allowance is gone."""
        self.left -= steps
        if self.left < 0:
            raise OutOfFuel


@dataclass(frozen=True, slots=True, eq=False)
class SchemaType:
    """The JSON values a place may hold (immutable; build with the module's functions).

    Attributes:
        kinds: bit mask of :data:`NULL` … :data:`OBJECT`; :data:`ALL` for any kind.
        items: the elements' type when ``kinds`` has :data:`ARRAY`; None: any.
        props: declared properties when ``kinds`` has :data:`OBJECT`; None: none declared.
        required: properties every object has.
        extra: the type of properties not in ``props``; None: any; :data:`NEVER`: there are
            none (the object is closed).
        values: when not None, the only values allowed, as ``(kind, value)`` pairs
            (``enum``, ``const``, literals); scalars only.
        bounds: ``(keyword, number)`` pairs such as ``("minimum", 0)``, checked against
            literal values only.
        depth: levels of nesting below this type.
    """

    kinds: int
    items: SchemaType | None = None
    props: Mapping[str, SchemaType] | None = None
    required: frozenset[str] = frozenset()
    extra: SchemaType | None = None
    values: frozenset[tuple[int, Any]] | None = None
    bounds: tuple[tuple[str, float], ...] = ()
    depth: int = 0


ANY = SchemaType(ALL)
"""Any JSON value: nothing is known (what cannot be inferred)."""

NEVER = SchemaType(0)
"""No value (``false`` as a schema; the ``extra`` of a closed object)."""

NULL_TYPE = SchemaType(NULL)
_SCALARS = {kind: SchemaType(kind) for kind in (BOOLEAN, INTEGER, FLOAT, NUMBER, STRING)}
_SCALARS[NULL] = NULL_TYPE


def scalar(kinds: int) -> SchemaType:
    """The type of the given kinds, with no structure (shared instances for common ones)."""
    found = _SCALARS.get(kinds)
    return found if found is not None else SchemaType(kinds)


def _make(
    kinds: int, items: SchemaType | None = None, props: Mapping[str, SchemaType] | None = None,
    required: frozenset[str] = frozenset(), extra: SchemaType | None = None,
    values: frozenset[tuple[int, Any]] | None = None, bounds: tuple[tuple[str, float], ...] = (),
) -> SchemaType:
    if kinds == ALL and items is None and props is None and extra is None and values is None:
        return ANY
    if not kinds & ARRAY:
        items = None
    if not kinds & OBJECT:
        props, required, extra = None, frozenset(), None
    depth = 0
    if items is not None:
        depth = items.depth + 1
    if props:
        depth = max(depth, 1 + max(p.depth for p in props.values()))
    if extra is not None and extra.kinds:
        depth = max(depth, extra.depth + 1)
    if depth > MAX_DEPTH:
        return scalar(kinds) if kinds != ALL else ANY
    if (items is None and props is None and not required and extra is None and values is None
            and not bounds):
        return scalar(kinds)
    return SchemaType(kinds, items, props, required, extra, values, bounds, depth)


def array_of(items: SchemaType, *, nullable: bool = False) -> SchemaType:
    """An array whose elements are ``items`` (or null, when ``nullable``)."""
    return _make(ARRAY | (NULL if nullable else 0), None if items is ANY else items)


def object_of(props: Mapping[str, SchemaType], *, closed: bool = True) -> SchemaType:
    """An object with exactly (``closed``) or at least these properties, all of them present."""
    return _make(OBJECT, props=dict(props), required=frozenset(props),
                 extra=NEVER if closed else None)


def without_null(t: SchemaType) -> SchemaType:
    """``t`` without null (what a projection keeps of its elements)."""
    if not t.kinds & NULL or t.kinds == ALL:
        return t
    return only(t, ALL & ~NULL)


def only(t: SchemaType, kinds: int) -> SchemaType:
    """The part of ``t`` of the given kinds, its structure kept (:data:`NEVER` if none)."""
    left = t.kinds & kinds
    if left == t.kinds:
        return t
    if not left:
        return NEVER
    values = None if t.values is None else frozenset(v for v in t.values if v[0] & left)
    return _make(left, t.items, t.props, t.required, t.extra, values, t.bounds)


def may_be_a_tag(t: SchemaType | None) -> bool:
    """Whether a required property of type ``t`` may be a msgspec tag field (a single
    allowed value), which msgspec fills in when it is missing: it is then not surely
    required."""
    return t is not None and t.values is not None and len(t.values) == 1


def kind_of(value: Any) -> int:
    """The kind of a decoded JSON value (:data:`ALL` for anything else, and for a
    ``{"$secret": NAME}`` reference: PROTOCOL.md §5 Secrets)."""
    kind = type(value)
    if kind is str:
        return STRING
    if kind is bool:
        return BOOLEAN
    if kind is int:
        return INTEGER
    if kind is float:
        return FLOAT
    if value is None:
        return NULL
    if kind is list:
        return ARRAY
    if kind is dict:
        if len(value) == 1 and isinstance(value.get("$secret"), str):
            return ALL  # a secret reference: its value is known only when the tool runs
        return OBJECT
    return ALL


# ── join ────────────────────────────────────────────────────────────────────


def join(a: SchemaType, b: SchemaType, fuel: Fuel) -> SchemaType:
    """The union of ``a`` and ``b``: every value of either (structure merged, widened where
    it would grow: enum values and bounds are kept only when both sides have them alike).

    Raises:
        OutOfFuel: the fuel ran out.
    """
    if a is b or b is NEVER:
        return a
    if a is NEVER:
        return b
    if a is ANY or b is ANY:
        return ANY
    fuel.spend()
    kinds = a.kinds | b.kinds
    if not b.kinds & ARRAY:
        items = a.items
    elif not a.kinds & ARRAY:
        items = b.items
    else:
        items = None if a.items is None or b.items is None else join(a.items, b.items, fuel)
    props: Mapping[str, SchemaType] | None
    required: frozenset[str]
    extra: SchemaType | None
    if not b.kinds & OBJECT:
        props, required, extra = a.props, a.required, a.extra
    elif not a.kinds & OBJECT:
        props, required, extra = b.props, b.required, b.extra
    else:
        props, required, extra = _join_objects(a, b, fuel)
    values = a.values | b.values if a.values is not None and b.values is not None else None
    bounds = a.bounds if a.bounds == b.bounds else ()
    return _make(kinds, items, props, required, extra, values, bounds)


def _join_objects(
    a: SchemaType, b: SchemaType, fuel: Fuel
) -> tuple[Mapping[str, SchemaType] | None, frozenset[str], SchemaType | None]:
    extra = _join_extra(a.extra, b.extra, fuel)
    if a.props is None or b.props is None:
        # a side that declares no property may have any: only two undeclared sides keep
        # their joined ``extra`` (``dict[str, int]`` or ``dict[str, str]``)
        both_undeclared = a.props is None and b.props is None
        return None, frozenset(), extra if both_undeclared else None
    fuel.spend(len(a.props) + len(b.props))
    merged: dict[str, SchemaType] = {}
    for name, t in a.props.items():
        other_t = b.props.get(name)
        if other_t is None:
            other_t = b.extra if b.extra is not None else ANY
        merged[name] = join(t, other_t, fuel)
    for name, t in b.props.items():
        if name not in merged:
            merged[name] = join(t, a.extra if a.extra is not None else ANY, fuel)
    return merged, a.required & b.required, extra


def _join_extra(a: SchemaType | None, b: SchemaType | None, fuel: Fuel) -> SchemaType | None:
    if a is None or b is None:
        return None
    return join(a, b, fuel)


# ── reading schemas ─────────────────────────────────────────────────────────

_CACHE: OrderedDict[tuple[int, bool], tuple[Any, SchemaType]] = OrderedDict()
_CACHE_LOCK = threading.Lock()


def schema_type(schema: Any, *, closed: bool = False) -> SchemaType:
    """The type a JSON Schema describes; cached by the schema object's identity.

    Args:
        schema: a JSON Schema (a dict, or True / False); anything else is :data:`ANY`.
        closed: read an object schema that declares ``properties`` and says nothing of
            ``additionalProperties`` as closed: true for outputs msgspec converts (a Struct
            or TypedDict output has exactly its declared fields).

    Returns:
        The type; :data:`ANY` for a schema over :data:`MAX_SCHEMA_NODES` sub-schemas. The
        schema must not be changed after it was read (a tool's schemas are not).
    """
    key = (id(schema), closed)
    with _CACHE_LOCK:
        found = _CACHE.get(key)
        if found is not None and found[0] is schema:
            _CACHE.move_to_end(key)
            return found[1]
    reader = _SchemaReader(schema, closed)
    try:
        result = reader.read(schema, 0)
    except OutOfFuel:
        result = ANY
    with _CACHE_LOCK:
        _CACHE[key] = (schema, result)  # the schema is kept: its id is not reused meanwhile
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return result


class _SchemaReader:
    """One schema read: its ``$defs`` and the fuel of :data:`MAX_SCHEMA_NODES`."""

    def __init__(self, root: Any, closed: bool) -> None:
        self.closed = closed
        self.fuel = Fuel(MAX_SCHEMA_NODES)
        self.defs: dict[str, Any] = {}
        if isinstance(root, Mapping):
            for key in ("$defs", "definitions"):
                found = root.get(key)
                if isinstance(found, Mapping):
                    self.defs.update({f"#/{key}/{name}": s for name, s in found.items()})

    def read(self, s: Any, depth: int) -> SchemaType:
        self.fuel.spend()
        if s is True:
            return ANY
        if s is False:
            return NEVER
        if not isinstance(s, Mapping) or depth > MAX_DEPTH:
            return ANY
        ref = s.get("$ref")
        if isinstance(ref, str):
            target = self.defs.get(ref)
            return ANY if target is None else self.read(target, depth + 1)
        own = self.own_type(s, depth)
        for key in ("anyOf", "oneOf"):
            alternatives = s.get(key)
            if isinstance(alternatives, list) and alternatives and own is ANY:
                result = NEVER
                for alternative in alternatives:
                    result = join(result, self.read(alternative, depth + 1), self.fuel)
                return result
        every = s.get("allOf")
        if isinstance(every, list) and every and own is ANY:
            return self.read(every[0], depth + 1)  # a superset of the intersection
        return own

    def own_type(self, s: Mapping[str, Any], depth: int) -> SchemaType:
        kinds = _kinds_of_type(s.get("type"))
        if kinds & STRING and s.get("format") == "decimal":
            kinds |= NUMBER  # msgspec converts numbers to a Decimal too
        values = None
        if "const" in s:
            values = _values_of([s["const"]])
        elif isinstance(s.get("enum"), list):
            values = _values_of(s["enum"])
        if values is not None:
            value_kinds = 0
            for kind, _ in values:
                value_kinds |= kind
            kinds &= value_kinds
        items: SchemaType | None = None
        if kinds & ARRAY:
            items = self.items_of(s, depth)
        props, required, extra = None, frozenset[str](), None
        if kinds & OBJECT:
            props, required, extra = self.object_of(s, depth)
        bounds = tuple((k, s[k]) for k in _BOUND_KEYWORDS
                       if k in s and type(s[k]) in (int, float))
        return _make(kinds, items, props, required, extra, values, bounds)

    def items_of(self, s: Mapping[str, Any], depth: int) -> SchemaType | None:
        prefix = s.get("prefixItems")
        rest = s.get("items", True)
        if isinstance(prefix, list):
            result = NEVER if rest is False else self.read(rest, depth + 1)
            for part in prefix:
                result = join(result, self.read(part, depth + 1), self.fuel)
            return None if result is ANY else result
        if "items" not in s:
            return None
        result = self.read(rest, depth + 1)
        return None if result is ANY else result

    def object_of(
        self, s: Mapping[str, Any], depth: int
    ) -> tuple[dict[str, SchemaType] | None, frozenset[str], SchemaType | None]:
        declared = s.get("properties")
        props: dict[str, SchemaType] | None = None
        if isinstance(declared, Mapping):
            props = {str(name): self.read(sub, depth + 1) for name, sub in declared.items()}
        listed = s.get("required")
        required = frozenset(r for r in listed if isinstance(r, str)) \
            if isinstance(listed, list) else frozenset()
        if "patternProperties" in s:
            return props, required, None
        more = s.get("additionalProperties")
        extra: SchemaType | None
        if more is None:
            extra = NEVER if self.closed and props is not None else None
        else:
            extra = self.read(more, depth + 1)
            extra = None if extra is ANY else extra
        return props, required, extra


def _kinds_of_type(declared: Any) -> int:
    if isinstance(declared, str):
        return _TYPE_NAMES.get(declared, ALL)
    if isinstance(declared, list):
        kinds = 0
        for name in declared:
            kinds |= _TYPE_NAMES.get(name, ALL) if isinstance(name, str) else ALL
        return kinds or ALL
    return ALL


def _values_of(values: Iterable[Any]) -> frozenset[tuple[int, Any]] | None:
    found = set()
    for value in values:
        kind = kind_of(value)
        if kind & (ARRAY | OBJECT) or kind == ALL:
            return None  # structured enum values: read as their kinds only
        found.add((kind, value))
    return frozenset(found)


# ── literals ────────────────────────────────────────────────────────────────


def type_of_value(value: Any, fuel: Fuel, depth: int = 0) -> SchemaType:
    """The type of a literal value: its kind and value for a scalar; for a list or object
    of at most 256 entries, the join of their types (an object closed, every key required);
    larger or deeper values have unknown parts.

    Raises:
        OutOfFuel: the fuel ran out.
    """
    fuel.spend()
    kind = kind_of(value)
    if kind == ALL or depth > MAX_DEPTH:
        return ANY
    if kind == ARRAY:
        if len(value) > _LITERAL_ELEMENTS:
            return scalar(ARRAY)
        items = NEVER
        for element in value:
            items = join(items, type_of_value(element, fuel, depth + 1), fuel)
        return _make(ARRAY, None if items is NEVER or items is ANY else items)
    if kind == OBJECT:
        if len(value) > _LITERAL_ELEMENTS:
            return scalar(OBJECT)
        props = {k: type_of_value(v, fuel, depth + 1) for k, v in value.items()}
        return _make(OBJECT, props=props, required=frozenset(props), extra=NEVER)
    return _make(kind, values=frozenset({(kind, value)}))
