"""Expressions: root-field extraction, ``$.`` roots, syntax errors, the dotted fast path
(PROTOCOL.md §3, §4)."""

from __future__ import annotations

from typing import Any

import jmespath
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from a2e_host.chains.expressions import (
    MAX_EXPRESSION_CHARS,
    MAX_EXPRESSION_NESTING,
    Expression,
    ExpressionError,
    ExpressionTooComplex,
    compile_expression,
    is_truthy,
)
from tests.support.expressions import NESTINGS


@pytest.mark.parametrize(
    ("text", "roots"),
    [
        ("read.output", {"read"}),
        ("length(read.output)", {"read"}),
        ("{a: n1.output, b: n2.output}", {"n1", "n2"}),
        ("input.files[?size > `10`].name", {"input"}),
        ("items[*].x", {"items"}),
        ("a | b.c", {"a"}),
        ("$.n1.output", {"n1"}),
        ("[a.output, b]", {"a", "b"}),
        ("a.output || b.output", {"a", "b"}),
        ("!a.output && b.x == c.y", {"a", "b", "c"}),
        ("sort_by(a.output, &b)", {"a"}),
        ("a.{x: y, z: w}", {"a"}),
        ("a[0].b", {"a"}),
        ("a[]", {"a"}),
        ("*.x", set()),
        ("[?x].y", set()),
        ("@.a.b", {"a"}),
        ("@ | a.b", {"a"}),
        ("a.b.c.d", {"a"}),
        ("`[1, 2, 3]`", set()),
        ("$", set()),
        ("item", {"item"}),
        ("length(output.items) > `0`", {"output"}),
    ],
)
def test_roots_are_the_fields_read_from_the_context_root(text: str, roots: set[str]) -> None:
    assert compile_expression(text).roots == frozenset(roots)


def test_leading_dollar_dot_means_the_root() -> None:
    context = {"input": {"x": 7}, "n1": {"output": [1, 2]}}
    assert compile_expression("$.input.x").search(context) == 7
    assert compile_expression("$.n1.output[1]").search(context) == 2
    assert compile_expression("  $.input.x").search(context) == 7


def test_bare_dollar_is_the_whole_context() -> None:
    context = {"input": {"x": 7}}
    assert compile_expression("$").search(context) == context


def test_text_keeps_the_expression_as_written() -> None:
    assert compile_expression("$.input.x").text == "$.input.x"


def test_compiled_expressions_are_cached_by_text() -> None:
    texts = [f"n{i}.output" for i in range(300)]  # more than jmespath's own 128
    first = [compile_expression(t) for t in texts]
    again = [compile_expression(t) for t in texts]
    assert all(a is b for a, b in zip(first, again, strict=True))


def test_bare_number_is_a_syntax_error_with_its_column() -> None:
    with pytest.raises(ExpressionError) as info:
        compile_expression("input.count > 0")
    assert info.value.column == 15  # 1-based: the "0"
    assert "backticks" in info.value.message


def test_column_counts_the_leading_dollar_dot() -> None:
    with pytest.raises(ExpressionError) as info:
        compile_expression("$.input.count > 0")
    assert info.value.column == 17


@pytest.mark.parametrize(
    ("text", "column", "words"),
    [
        ("a.", 3, "ends too early"),
        ("a ~ b", 3, "~"),
        ("length($.a)", 8, "'$'"),
        ("lenght(a)", 1, "unknown function lenght()"),
        ("x.y | nosuch (a)", 7, "unknown function nosuch()"),
    ],
)
def test_syntax_errors_name_the_column(text: str, column: int, words: str) -> None:
    with pytest.raises(ExpressionError) as info:
        compile_expression(text)
    assert info.value.column == column
    assert words in info.value.message


@pytest.mark.parametrize("text", ["", "   ", "$."])
def test_empty_expression_is_an_error_without_a_column(text: str) -> None:
    with pytest.raises(ExpressionError) as info:
        compile_expression(text)
    assert info.value.column is None


@pytest.mark.parametrize(
    ("value", "truthy"),
    [
        (False, False), (None, False), ("", False), ([], False), ({}, False),
        (0, True), (0.0, True), ("0", True), ([0], True), ({"a": None}, True), (True, True),
    ],
)
def test_truthiness_follows_jmespath(value: Any, truthy: bool) -> None:
    assert is_truthy(value) is truthy
    # the same answer as jmespath's own `||` (which returns the right side when left is false)
    assert (jmespath.search("a || `\"other\"`", {"a": value}) != "other") is truthy


@pytest.mark.parametrize("text", ["n12.output", "input.files", "item", "a.b.c.d"])
def test_plain_dotted_paths_take_the_fast_path(text: str) -> None:
    assert compile_expression(text).path == tuple(text.split("."))


@pytest.mark.parametrize("text", ["a[0]", "length(a)", "a.\"b\"", "a || b", "@"])
def test_other_expressions_use_the_interpreter(text: str) -> None:
    assert compile_expression(text).path is None


def test_search_errors_propagate_to_the_caller() -> None:
    with pytest.raises(jmespath.exceptions.JMESPathTypeError):
        compile_expression("length(read.output)").search({"read": {"output": 5}})


_KEYS = st.sampled_from(["a", "b", "c", "output", "input", "_x", "item"])
_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(
    max_size=3
)
_VALUES = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(
    context=st.dictionaries(_KEYS, _VALUES, max_size=5),
    path=st.lists(_KEYS, min_size=1, max_size=5),
)
def test_dotted_fast_path_agrees_with_jmespath(context: dict[str, Any], path: list[str]) -> None:
    text = ".".join(path)
    expr = compile_expression(text)
    assert expr.path is not None
    assert expr.search(context) == jmespath.search(text, context)
    assert compile_expression("$." + text).search(context) == jmespath.search(text, context)


def test_expression_repr_names_the_text() -> None:
    assert repr(compile_expression("read.output")) == "Expression('read.output')"
    assert isinstance(compile_expression("read.output"), Expression)


@settings(deadline=None)  # the default 200 ms per example fails on a busy machine
@given(
    st.lists(
        st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), min_size=1, max_size=6
    )
)
def test_dotted_paths_get_the_same_tree_jmespath_would_parse(names: list[str]) -> None:
    text = ".".join(names)
    assert compile_expression(text).parsed == jmespath.compile(text).parsed


# ── bounds at compile time (issue 12, item 2) ──────────────────────────────────


@pytest.mark.parametrize("form", NESTINGS)
def test_nesting_beyond_the_bound_is_refused_before_anything_recurses(form: str) -> None:
    for depth in (MAX_EXPRESSION_NESTING + 2, 600, 5_000):
        text = NESTINGS[form](depth)
        with pytest.raises(ExpressionTooComplex) as info:
            compile_expression(text)
        assert f"at most {MAX_EXPRESSION_NESTING} are allowed" in info.value.message
        assert "levels deep" in info.value.message


@pytest.mark.parametrize("form", NESTINGS)
def test_nesting_within_the_bound_compiles_and_evaluates(form: str) -> None:
    text = NESTINGS[form](MAX_EXPRESSION_NESTING - 3)
    expr = compile_expression(text)
    try:
        expr.search({"input": [{"a": [{"a": True, "b": 1}], "b": 1}]})
    except jmespath.exceptions.JMESPathError:
        pass  # a type error is an answer; a RecursionError would not be


def test_a_long_pipe_chain_is_one_node_not_a_nesting() -> None:
    text = " | ".join(["[@]"] * 500)
    expr = compile_expression(text)
    assert expr.parsed["type"] == "pipe" and len(expr.parsed["children"]) == 500
    expected: Any = {}
    for _ in range(500):
        expected = [expected]
    assert expr.search({}) == expected


def test_an_expression_longer_than_the_bound_is_refused() -> None:
    text = "[" + ", ".join(["a"] * (MAX_EXPRESSION_CHARS // 3 + 1)) + "]"
    with pytest.raises(ExpressionTooComplex) as info:
        compile_expression(text)
    assert f"at most {MAX_EXPRESSION_CHARS:,} are allowed" in info.value.message


def test_strings_and_quoted_names_do_not_count_as_nesting() -> None:
    for text in ["'" + "(" * 500 + "'", '"' + "[" * 500 + '"', '`"' + "{" * 500 + '"`']:
        compile_expression(text)


@pytest.mark.parametrize(
    "text",
    [
        "input.items[?size > `10`].name", "sort_by(input.ys, &n)[-1].n", "input.a || input.b",
        "input.xs[1:3]", "input.xs[::-1]", "{x: input.a, y: [input.b, `1`]}", "input.xs[]",
        "length(input.xs) == `3`", "max_by(input.ys, &n).n", "*.a", "input.ys[*].n",
        "not_null(input.z, input.a)", "join(', ', input.names)", "merge(input.o, `{\"k\": 2}`)",
        "to_string(input.o)", "keys(input.o)", "input.xs[?@ == `2`] | [0]", "!input.z",
        "input.a && input.b", "map(&n, input.ys)", "reverse(input.names)", "sum(input.xs)",
        "contains(input.names, 'b')", "input.ys[?n == `1`].n | length(@)",
    ],
)
def test_the_budgeted_interpreter_agrees_with_jmespath(text: str) -> None:
    context = {"input": {"items": [{"size": 5, "name": "s"}, {"size": 50, "name": "l"}],
                         "xs": [1, 2, 3], "ys": [{"n": 2}, {"n": 1}], "a": "A", "b": [],
                         "z": None, "names": ["a", "b"], "o": {"k": 1, "j": [1]}}}
    assert compile_expression(text).search(context) == jmespath.search(text, context)


def test_the_cache_bounds_its_text_not_only_its_entries() -> None:
    from a2e_host.chains import expressions

    for i in range(24):  # 24 × ~60,000 characters: past the cache's 1 Mi characters
        compile_expression(f"['{i}', '" + "x" * 60_000 + "']")
    assert sum(len(text) for text in expressions._CACHE) <= expressions._CACHE_CHARS
