"""The type lattice read from JSON Schemas, and the fit of values and types into it
(PROTOCOL.md §4 static checks): msgspec's semantics, widened where unsure, bounded always."""

from __future__ import annotations

import time
from typing import Any, Literal

import msgspec
import pytest

from a2e_host.chains.schema_fit import MAY_NOT_FIT, NEVER_FITS, check_value, fit
from a2e_host.chains.schema_types import (
    ANY,
    MAX_SCHEMA_NODES,
    NEVER,
    Fuel,
    OutOfFuel,
    SchemaType,
    join,
    schema_type,
    type_of_value,
)
from a2e_host.chains.schema_words import describe
from a2e_host.tools.model import json_schema


class Entry(msgspec.Struct):
    name: str
    size: int
    kind: Literal["file", "dir"] = "file"


class Listing(msgspec.Struct):
    entries: list[Entry]
    path: str
    note: str | None = None


def words(schema: Any, *, closed: bool = False) -> str:
    return describe(schema_type(schema, closed=closed), depth=3)


@pytest.mark.parametrize(("schema", "expected"), [
    ({"type": "integer"}, "integer"),
    ({"type": "number"}, "number"),
    ({"anyOf": [{"type": "integer"}, {"type": "number"}]}, "number"),
    ({"type": ["string", "null"]}, "string or null"),
    ({"enum": ["a", "b"]}, "one of 'a', 'b'"),
    ({"const": 3}, "integer 3"),
    ({"type": "array", "items": {"type": "string"}}, "array of string"),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, "object"),
    ({}, "any"),
    (True, "any"),
    (False, "nothing"),
    ({"$ref": "#/$defs/missing"}, "any"),
    ({"allOf": [{"type": "string"}, {"minLength": 2}]}, "string"),
])
def test_a_schema_reads_as_its_kinds(schema: Any, expected: str) -> None:
    assert words(schema) == expected


def test_msgspec_schemas_read_through_refs_with_optional_fields_nullable() -> None:
    listing = schema_type(json_schema(Listing), closed=True)
    assert listing.props is not None and listing.required == {"entries", "path"}
    entry = listing.props["entries"].items
    assert entry is not None and entry.props is not None
    assert (describe(entry.props["kind"]), entry.extra is NEVER) == ("one of 'dir', 'file'", True)
    assert describe(listing.props["note"]) == "string or null"


def test_a_schema_is_read_once_per_object() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert schema_type(schema) is schema_type(schema)
    assert schema_type(schema, closed=True) is not schema_type(schema)


def test_join_keeps_what_both_sides_say_and_widens_the_rest() -> None:
    fuel = Fuel(1000)
    a = type_of_value({"x": 1, "y": "s"}, fuel)
    b = type_of_value({"x": 2.5}, fuel)
    both = join(a, b, fuel)
    assert describe(both, 2) == "object with fields x, y"
    assert both.props is not None and describe(both.props["x"]) == "one of 1, 2.5"
    assert both.required == {"x"}
    assert join(a, ANY, fuel) is ANY and join(NEVER, a, fuel) is a


@pytest.mark.parametrize(("value", "schema", "found"), [
    (1.0, {"type": "integer"}, ("", "integer", "float 1.0")),
    (True, {"type": "integer"}, ("", "integer", "boolean true")),
    (3, {"type": "number"}, None),
    (-1, {"type": "integer", "minimum": 0}, ("", "integer", "integer -1")),
    ("ab", {"type": "string", "maxLength": 1}, ("", "string", "string 'ab'")),
    ([1, "x"], {"type": "array", "items": {"type": "integer"}}, ("[1]", "integer",
                                                                  "string 'x'")),
    ({"a": 1}, {"type": "object", "required": ["b"]}, (".b", "any", "nothing")),
    ({"a": 1}, {"type": "object", "properties": {}, "additionalProperties": False},
     (".a", "no such field", "integer 1")),
    ("c", {"enum": ["a", "b"]}, ("", "one of 'a', 'b'", "string 'c'")),
    (None, {"anyOf": [{"type": "integer"}, {"type": "null"}]}, None),
])
def test_a_literal_is_held_to_its_schema_exactly(
    value: Any, schema: Any, found: tuple[str, str, str] | None
) -> None:
    misfit = check_value(value, schema_type(schema), Fuel(1000))
    assert (misfit and (misfit.path, misfit.expected, misfit.got)) == found


def test_a_literal_bound_names_itself() -> None:
    misfit = check_value(0, schema_type({"type": "integer", "exclusiveMinimum": 0}), Fuel(10))
    assert misfit is not None and misfit.reason == "is not above the exclusiveMinimum 0"


@pytest.mark.parametrize(("got", "want", "verdict"), [
    ({"type": "string"}, {"type": "integer"}, NEVER_FITS),
    ({"type": "integer"}, {"type": "number"}, None),
    ({"type": "number"}, {"type": "integer"}, MAY_NOT_FIT),
    ({"type": "string"}, {"type": ["integer", "null"]}, MAY_NOT_FIT),  # a skipped node: null
    ({"type": ["string", "null"]}, {"type": "string"}, MAY_NOT_FIT),
    ({"type": "array", "items": {"type": "string"}},
     {"type": "array", "items": {"type": "integer"}}, MAY_NOT_FIT),  # it may be empty
    ({}, {"type": "integer"}, None),  # nothing known: left to run time
    ({"enum": ["x"]}, {"enum": ["a", "b"]}, NEVER_FITS),
    ({"type": "string"}, {"enum": ["a", "b"]}, MAY_NOT_FIT),
])
def test_an_inferred_type_fits_never_maybe_or_always(got: Any, want: Any,
                                                     verdict: int | None) -> None:
    misfit = fit(schema_type(got), schema_type(want), Fuel(1000))
    assert (misfit.verdict if misfit else None) == verdict


def test_an_object_missing_a_required_field_never_fits_only_when_it_is_closed() -> None:
    want = schema_type({"type": "object", "properties": {"a": {"type": "integer"}},
                        "required": ["a"]})
    closed = schema_type({"type": "object", "properties": {"b": {"type": "integer"}},
                          "required": ["b"]}, closed=True)
    opened = schema_type({"type": "object", "properties": {"b": {"type": "integer"}},
                          "required": ["b"]})
    never = fit(closed, want, Fuel(100))
    assert never is not None and (never.verdict, never.path, never.reason) == (
        NEVER_FITS, ".a", "is missing")
    maybe = fit(opened, want, Fuel(100))
    assert maybe is not None and maybe.verdict == MAY_NOT_FIT


# ── bounds ──


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


def test_a_deep_schema_is_read_to_a_bounded_depth_without_recursion_errors() -> None:
    t = schema_type(nested(5000))
    assert t.depth <= 24 and describe(t, 0) == "object"


def test_a_huge_schema_reads_as_any_within_its_budget() -> None:
    schema = {"type": "object",
              "properties": {f"p{i}": {"type": "integer"} for i in range(MAX_SCHEMA_NODES * 4)}}
    started = time.process_time()
    assert schema_type(schema) is ANY
    assert time.process_time() - started < 1.0  # generous: it is ~4,000 dict visits


def test_self_referencing_schemas_stop_at_the_depth_bound() -> None:
    schema = {"$ref": "#/$defs/T", "$defs": {"T": {
        "type": "object", "properties": {"next": {"$ref": "#/$defs/T"}}}}}
    t = schema_type(schema)
    assert t.depth <= 24
    assert isinstance(t, SchemaType)


def test_fuel_bounds_every_operation() -> None:
    wide = type_of_value({f"k{i}": i for i in range(200)}, Fuel(10_000))
    with pytest.raises(OutOfFuel):
        join(wide, type_of_value({f"j{i}": i for i in range(200)}, Fuel(10_000)), Fuel(50))
    with pytest.raises(OutOfFuel):
        integers = schema_type({"type": "array", "items": {"type": "integer"}})
        check_value(list(range(10_000)), integers, Fuel(100))
