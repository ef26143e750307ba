"""The type of a JMESPath expression, from the types of the context's fields (PROTOCOL.md §3,
§4 static checks): jmespath's semantics over types, unknown where nothing is known, bounded."""

from __future__ import annotations

import time
from typing import Any

import jmespath
import pytest

from a2e_host.chains.expressions import compile_expression
from a2e_host.chains.schema_types import ANY, Fuel, SchemaType, schema_type
from a2e_host.chains.schema_words import describe
from a2e_host.chains.type_inference import infer

READ = schema_type({
    "type": "object",
    "properties": {"text": {"type": "string"}, "bytes": {"type": "integer"},
                   "lines": {"type": "array", "items": {"type": "string"}},
                   "rows": {"type": "array", "items": {
                       "type": "object", "properties": {"name": {"type": "string"},
                                                        "size": {"type": "integer"}},
                       "required": ["name", "size"]}},
                   "maybe": {"type": "string"}},
    "required": ["text", "bytes", "lines", "rows"],
}, closed=True)
NODE = schema_type({"type": "object", "properties": {"output": True, "status": {"type": "string"}},
                    "required": ["output", "status"]})


def root(name: str) -> SchemaType:
    if name == "r":
        assert NODE.props is not None
        return SchemaType(NODE.kinds, props={"output": READ, "status": NODE.props["status"]},
                          required=frozenset({"output", "status"}), extra=NODE.extra,
                          depth=READ.depth + 1)
    return ANY


def typed(text: str) -> str:
    return describe(infer(compile_expression(text), root).type, depth=3)


@pytest.mark.parametrize(("text", "expected"), [
    ("r.output.text", "string"),
    ("$.r.output.bytes", "integer"),
    ("r.output.maybe", "string or null"),
    ("r.output.lines", "array of string"),
    ("r.output.lines[0]", "string or null"),
    ("r.output.lines[1:]", "array of string"),
    ("r.output.rows[*].name", "array of string"),
    ("r.output.rows[?size > `1`].size", "array of integer"),
    ("r.output.rows[0].size", "integer or null"),
    ("r.output.rows[].name", "array of string"),
    ("r.output.*", "array of (integer or string or array of (string or object with fields "
                   "name, size))"),
    ("r.output.lines | [0]", "string or null"),
    ("length(r.output.lines)", "integer"),
    ("to_string(r.output.bytes)", "string"),
    ("join(', ', r.output.lines)", "string"),
    ("keys(r.output)", "array of string"),
    ("max(r.output.rows[*].size)", "integer or null"),
    ("sort(r.output.lines)", "array of string"),
    ("to_number(r.output.text)", "number or null"),
    ("not_null(r.output.maybe, 'x')", "string or null"),
    ("{n: r.output.bytes, t: r.output.text}", "object with fields n, t"),
    ("[r.output.bytes, r.output.text]", "array of (integer or string)"),
    ("r.output.maybe || r.output.bytes", "integer or string"),
    ("!(r.output.text)", "boolean"),
    ("!r.output.text", "null"),  # jmespath reads it as (!r).output.text
    ("r.output.bytes == `1`", "boolean"),
    ("r.output.bytes < `1`", "boolean or null"),
    ("`[1, 2]`", "array of one of 1, 2"),
    ("'word'", "string 'word'"),
    ("r.status", "string"),
])
def test_an_expression_over_known_outputs_has_a_type(text: str, expected: str) -> None:
    assert typed(text) == expected


@pytest.mark.parametrize("text", [
    "input.x", "input.items[*].name", "output", "error.message", "@", "merge(r.output, `{}`)",
    "input.xs[?a > `1`] | [0]", "map(&name, input.rows)",
])
def test_what_is_not_known_stays_unknown(text: str) -> None:
    got = infer(compile_expression(text), root).type
    assert got is ANY or describe(got) in ("any", "object", "array")


@pytest.mark.parametrize(("text", "note"), [
    ("r.output.txt", "there is no field 'txt' there (fields: bytes, lines, maybe, rows, text); "
                     "did you mean 'text'?"),
    ("r.output.text.length", "field 'length' is read from a string"),
    ("r.output.bytes[0]", "an index [n] is read from an integer"),
])
def test_a_read_that_can_find_nothing_is_null_with_its_reason(text: str, note: str) -> None:
    got = infer(compile_expression(text), root)
    assert (describe(got.type), got.note) == ("null", note)


def test_types_match_what_jmespath_gives_on_a_value_of_the_schema() -> None:
    value: dict[str, Any] = {"r": {"status": "done", "output": {
        "text": "ab", "bytes": 2, "lines": ["a", "b"],
        "rows": [{"name": "x", "size": 1}, {"name": "y", "size": 3}]}}}
    kinds = {str: "string", int: "integer", list: "array", dict: "object", bool: "boolean",
             type(None): "null"}
    for text in ("r.output.text", "r.output.lines[0]", "r.output.rows[?size > `1`].size",
                 "length(r.output.lines)", "r.output.rows[0].size", "r.output.txt",
                 "r.output.maybe", "r.output.bytes < `1`"):
        actual = kinds[type(jmespath.search(text, value))]
        assert actual in typed(text), text


def test_inference_is_bounded_by_its_fuel_and_gives_up_as_unknown() -> None:
    text = "r.output.text | " + " | ".join(["@"] * 2000)  # a pipe is no nesting
    started = time.process_time()
    got = infer(compile_expression(text), root, Fuel(100))
    assert got.type is ANY
    assert time.process_time() - started < 1.0  # generous: 100 steps


def test_a_wide_multiselect_of_distinct_objects_is_bounded() -> None:
    parts = ", ".join(f"{{k{i}: r.output.rows}}" for i in range(600))
    started = time.process_time()
    got = infer(compile_expression(f"[{parts}]"), root)
    assert got.type is ANY or describe(got.type).startswith("array")
    assert time.process_time() - started < 2.0  # generous: bounded by MAX_INFERENCE_STEPS
