"""The text, json and bench packs: exact definitions of their outputs."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.tools import ToolRegistry, load_tools


@pytest.fixture(scope="module")
def tools() -> ToolRegistry:
    return load_tools(HostConfig(tools=("text", "json", "bench")))


def call(tools: ToolRegistry, name: str, args: dict[str, Any]) -> Any:
    tool = tools.get(name)
    assert tool is not None
    return anyio.run(tool.invoke, args)


@pytest.mark.parametrize(
    ("text", "words", "lines"),
    [("", 0, 0), ("a\n", 1, 1), ("a b\nc", 3, 2), ("one  two\n\nthree\n", 3, 3)],
)
def test_word_count_definitions(tools: ToolRegistry, text: str, words: int, lines: int) -> None:
    assert call(tools, "word_count", {"text": text}) == {
        "words": words,
        "lines": lines,
        "chars": len(text),
    }


def test_regex_findall_returns_matches_and_groups(tools: ToolRegistry) -> None:
    out = call(tools, "regex_findall", {"text": "a1 b22", "pattern": r"([a-z])(\d+)"})
    assert out == {
        "matches": ["a1", "b22"],
        "groups": [["a", "1"], ["b", "22"]],
        "count": 2,
        "truncated": False,
    }


def test_regex_findall_bad_pattern_names_it(tools: ToolRegistry) -> None:
    with pytest.raises(NodeError, match=r"invalid pattern '\('"):
        call(tools, "regex_findall", {"text": "", "pattern": "("})


def test_template_leaves_unknown_placeholders(tools: ToolRegistry) -> None:
    out = call(tools, "template", {"template": "$a and ${b}", "values": {"a": 1}})
    assert out == {"text": "1 and ${b}"}


def test_csv_parse_rows_keyed_by_header(tools: ToolRegistry) -> None:
    out = call(tools, "csv_parse", {"text": "n;v\nx;1\ny\n", "delimiter": ";"})
    assert out == {"rows": [{"n": "x", "v": "1"}, {"n": "y", "v": None}], "columns": ["n", "v"]}


def test_csv_parse_long_row_is_named(tools: ToolRegistry) -> None:
    with pytest.raises(NodeError, match="row 2 has 3 cells but the header has 2"):
        call(tools, "csv_parse", {"text": "a,b\n1,2,3\n"})


def test_json_parse_and_dump_round_trip(tools: ToolRegistry) -> None:
    value = call(tools, "json_parse", {"text": '{"b": [1, 2.5, "é"], "a": null}'})["value"]
    assert value == {"b": [1, 2.5, "é"], "a": None}
    assert call(tools, "json_dump", {"value": value, "sort_keys": True}) == {
        "text": '{"a": null, "b": [1, 2.5, "é"]}'
    }


def test_json_parse_invalid_text_fails(tools: ToolRegistry) -> None:
    with pytest.raises(NodeError, match="not valid JSON"):
        call(tools, "json_parse", {"text": "{nope"})


def test_bench_noop_returns_x_and_sleep_ms_waits(tools: ToolRegistry) -> None:
    assert call(tools, "noop", {"x": {"k": [1]}}) == {"k": [1]}
    assert call(tools, "noop", {}) is None
    assert call(tools, "sleep_ms", {"ms": 1, "x": 7}) == 7
    with pytest.raises(NodeError, match="'ms' must be a number >= 0"):
        call(tools, "sleep_ms", {"ms": "1"})


def test_json_value_returns_its_value_unchanged(tools: ToolRegistry) -> None:
    assert call(tools, "json_value", {"value": {"a": [1, None, "é"]}}) == {"a": [1, None, "é"]}
    assert call(tools, "json_value", {"value": 3}) == 3
