"""The conformance fixture tools of PROTOCOL.md §7, with their exact outputs."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from a2e_toolpacks.conformance import reset_flaky

from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.tools import ToolRegistry, load_tools


@pytest.fixture
def tools() -> ToolRegistry:
    reset_flaky()
    return load_tools(HostConfig(tools=("conformance",)))


def call(tools: ToolRegistry, name: str, args: dict[str, Any]) -> Any:
    tool = tools.get(name)
    assert tool is not None, name
    return anyio.run(tool.invoke, args)


def test_the_pack_has_exactly_the_fixture_tools(tools: ToolRegistry) -> None:
    assert tools.names() == sorted(
        ["echo", "add", "concat", "count", "upper", "sleep", "fail", "big", "flaky", "progress"]
    )


@pytest.mark.parametrize(
    ("name", "args", "expected"),
    [
        ("echo", {"a": [1, {"b": None}], "c": "d"}, {"a": [1, {"b": None}], "c": "d"}),
        ("echo", {}, {}),
        ("add", {"a": 2, "b": 3}, {"sum": 5}),
        ("add", {"a": 0.5, "b": -2}, {"sum": -1.5}),
        ("concat", {"parts": ["a", "b", "c"]}, {"text": "abc"}),
        ("concat", {"parts": []}, {"text": ""}),
        ("count", {"items": [1, "x", None]}, {"count": 3}),
        ("upper", {"text": "héllo"}, {"text": "HÉLLO"}),
        ("sleep", {"seconds": 0}, {"slept": 0, "value": None}),
        ("sleep", {"seconds": 0.01, "value": {"k": 1}}, {"slept": 0.01, "value": {"k": 1}}),
        ("big", {"bytes": 5}, {"data": "xxxxx"}),
        ("big", {"bytes": 0}, {"data": ""}),
    ],
)
def test_fixture_output(
    tools: ToolRegistry, name: str, args: dict[str, Any], expected: Any
) -> None:
    out = call(tools, name, args)
    assert out == expected
    assert type(out) is type(expected)


def test_add_sum_keeps_integers_integral(tools: ToolRegistry) -> None:
    assert type(call(tools, "add", {"a": 2, "b": 3})["sum"]) is int


def test_add_without_b_fails_naming_b(tools: ToolRegistry) -> None:
    with pytest.raises(NodeError, match=r"input field 'b' is required"):
        call(tools, "add", {"a": 1})


def test_add_with_a_string_names_the_field(tools: ToolRegistry) -> None:
    with pytest.raises(NodeError, match=r"Expected `number`, got `str` at \$\.a"):
        call(tools, "add", {"a": "1", "b": 2})


def test_fail_fails_with_exactly_the_message(tools: ToolRegistry) -> None:
    with pytest.raises(NodeError) as info:
        call(tools, "fail", {"message": "disk on fire"})
    assert info.value.message == "disk on fire"


def test_flaky_fails_the_first_calls_per_key_then_counts_attempts(tools: ToolRegistry) -> None:
    for _ in range(2):
        with pytest.raises(NodeError, match="fails on purpose") as info:
            call(tools, "flaky", {"key": "k1", "failures": 2})
        assert info.value.retryable is True  # a node's retry retries it (§5 Recovery)
    assert call(tools, "flaky", {"key": "other", "failures": 0}) == {"attempts": 1}
    assert call(tools, "flaky", {"key": "k1", "failures": 2}) == {"attempts": 3}
    assert call(tools, "flaky", {"key": "k1", "failures": 2}) == {"attempts": 4}


def test_sleep_is_cancellable(tools: ToolRegistry) -> None:
    sleep = tools.get("sleep")
    assert sleep is not None

    async def main() -> bool:
        with anyio.fail_after(10), anyio.move_on_after(0.05) as scope:
            await sleep.invoke({"seconds": 60})
        return scope.cancelled_caught

    assert anyio.run(main) is True


def test_flaky_is_never_cached_and_the_pure_fixtures_are(tools: ToolRegistry) -> None:
    cacheable = {name: tools.get(name).cacheable for name in tools.names()}  # type: ignore[union-attr]
    assert cacheable == {"add": True, "big": True, "concat": True, "count": True,
                         "echo": True, "fail": True, "flaky": False, "sleep": True,
                         "progress": False, "upper": True}
