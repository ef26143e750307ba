"""The text, json and bench packs: exact definitions of their outputs."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from a2e_toolpacks.text import REGEX_TIMEOUT, pattern_size

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


def test_bench_tools_are_pure_so_declared_idempotent(tools: ToolRegistry) -> None:
    # a durable run may then re-run them on resume without holding their start
    pack = [tools.get("noop"), tools.get("sleep_ms")]
    assert [(t.name, t.side_effects, t.idempotent) for t in pack if t is not None] == [
        ("noop", "none", True), ("sleep_ms", "none", True)]


def test_json_value_returns_its_value_unchanged(tools: ToolRegistry) -> None:
    assert call(tools, "json_value", {"value": {"a": [1, None, "é"]}}) == {"a": [1, None, "é"]}
    assert call(tools, "json_value", {"value": 3}) == 3


# ── regex_findall under hostile patterns (issue 12.4) ──


def test_the_issue_pattern_answers_at_once(tools: ToolRegistry) -> None:
    """``(a+)+$`` over ``"a"*27 + "!"`` took 17 s with Python's re."""
    started = time.monotonic()
    out = call(tools, "regex_findall", {"text": "a" * 27 + "!", "pattern": "(a+)+$"})
    assert out["count"] == 0
    assert time.monotonic() - started < 5


def test_catastrophic_backtracking_fails_the_node_within_the_tool_budget(
    tools: ToolRegistry,
) -> None:
    started = time.monotonic()
    with pytest.raises(NodeError, match=r"did not finish within its 1 s budget") as info:
        call(tools, "regex_findall", {"text": "a" * 40 + "!", "pattern": "(a|a)+$"})
    assert info.value.details == {"timeout": REGEX_TIMEOUT}
    assert time.monotonic() - started < 10


def test_the_chain_deadline_shortens_the_regex_budget(tools: ToolRegistry) -> None:
    """With 0.3 s left, the matching thread stops by then: no CPU is burnt after the
    caller gave up (Python's re ran on for seconds in an abandoned thread)."""
    tool = tools.get("regex_findall")
    assert tool is not None

    async def main() -> None:
        with anyio.move_on_after(0.3):
            try:
                await tool.invoke({"text": "a" * 40 + "!", "pattern": "(a|a)+$"})
            except NodeError as exc:  # its own 0.3 s budget may fire before the cancel
                assert "did not finish within its 0.3 s budget" in exc.message
        # unbounded, (a|a)+$ over 40 a's backtracks for hours: the process must go quiet
        # soon after the deadline (a few windows allowed for a loaded machine)
        windows: list[float] = []
        for _ in range(10):
            cpu = time.process_time()
            await anyio.sleep(0.5)
            windows.append(time.process_time() - cpu)
            if windows[-1] < 0.15:
                return
        raise AssertionError(f"CPU per 0.5 s window after the deadline: {windows}")

    anyio.run(main)


def test_the_event_loop_keeps_running_while_a_regex_backtracks(tools: ToolRegistry) -> None:
    tool = tools.get("regex_findall")
    assert tool is not None
    gaps: list[float] = []

    async def ticker(done: anyio.Event) -> None:
        last = time.monotonic()
        while not done.is_set():
            await anyio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    async def main() -> None:
        done = anyio.Event()
        async with anyio.create_task_group() as tg:
            tg.start_soon(ticker, done)
            with pytest.raises(NodeError, match="did not finish"):
                await tool.invoke({"text": "a" * 40 + "!", "pattern": "(a|a)+$"})
            done.set()

    anyio.run(main)
    assert len(gaps) > 10 and max(gaps) < 0.5, f"the loop stalled {max(gaps):.2f} s"


@pytest.mark.parametrize(
    "pattern",
    [r"(?:a{65535}){65535}", "a{4294967294}", "(?:(?:x{100}){100}){100}", "a" * 30_000],
)
def test_a_pattern_that_would_expand_in_memory_is_refused_before_compiling(
    tools: ToolRegistry, pattern: str
) -> None:
    with pytest.raises(NodeError, match=r"is too large: it compiles to more than 20000"):
        call(tools, "regex_findall", {"text": "a", "pattern": pattern})


@pytest.mark.parametrize(
    ("pattern", "size"),
    [
        (r"\d{4}-\d{2}-\d{2}", 10),
        (r"(?:ab){100}", 500),
        (r"(?:(?:a{1,2}){1,1000}){1,1000}", 7),
        (r"\x{263a}{2}", 2),
        (r"[a{9999}]", 1),
        ("a{,5}", 1),
    ],
)
def test_pattern_size_counts_repeats_by_their_minimum(pattern: str, size: int) -> None:
    assert pattern_size(pattern) == size


def test_regex_syntax_extensions_work(tools: ToolRegistry) -> None:
    out = call(tools, "regex_findall", {"text": "héllo wörld 42", "pattern": r"\p{L}+"})
    assert out["matches"] == ["héllo", "wörld"]
