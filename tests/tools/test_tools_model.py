"""Tool: schemas from type hints, validation messages, timeouts, failures, output caps."""

from __future__ import annotations

import threading
from typing import Any, TypedDict

import anyio
import msgspec
import pytest

from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError, NodeTimeout
from a2e_host.tools import Tool, ToolPack, ToolRegistry, load_tools, tool


class Point(msgspec.Struct):
    x: int
    y: int = 0


class Norm(TypedDict):
    norm: int


@tool(blocking=False)
def manhattan(p: Point) -> Norm:
    """Manhattan norm of a point."""
    return {"norm": abs(p.x) + abs(p.y)}


@tool
def scale(value: float, factor: float = 2.0) -> dict[str, Any]:
    """Multiply.

    Second paragraph is not part of the description.
    """
    return {"value": value * factor}


def test_struct_parameter_gives_the_input_schema_and_is_converted() -> None:
    assert manhattan.input_schema["properties"] == {
        "x": {"type": "integer"},
        "y": {"type": "integer", "default": 0},
    }
    assert manhattan.input_schema["required"] == ["x"]
    assert manhattan.output_schema["properties"] == {"norm": {"type": "integer"}}
    assert anyio.run(manhattan.invoke, {"x": -3, "y": 4}) == {"norm": 7}


def test_keyword_parameters_become_input_fields_with_defaults() -> None:
    assert scale.input_schema["required"] == ["value"]
    assert scale.description == "Multiply."
    assert anyio.run(scale.invoke, {"value": 1.5}) == {"value": 3.0}
    assert scale.output_schema == {"type": "object"}


def test_missing_field_is_named_in_the_error() -> None:
    with pytest.raises(NodeError, match=r"^tool 'manhattan': input field 'x' is required$"):
        anyio.run(manhattan.invoke, {"y": 1})


def test_wrong_type_names_the_path() -> None:
    with pytest.raises(NodeError) as info:
        anyio.run(scale.invoke, {"value": "three"})
    assert (
        info.value.message == "tool 'scale': invalid input: Expected `float`, got `str` at $.value"
    )


def test_any_object_input_is_passed_unvalidated() -> None:
    seen: list[Any] = []

    def record(args: dict[str, Any]) -> Any:
        seen.append(args)
        return len(args)

    t = tool(record, blocking=False)
    assert t.input_type is None and t.input_schema == {"type": "object"}
    args = {"anything": [1, 2]}
    assert anyio.run(t.invoke, args) == 1
    assert seen[0] is args


def test_output_not_matching_its_schema_fails_the_node() -> None:
    @tool(blocking=False)
    def liar() -> Norm:
        return {"norm": "big"}  # type: ignore[typeddict-item]

    with pytest.raises(NodeError, match=r"tool 'liar' returned an output that does not match"):
        anyio.run(liar.invoke, {})


def test_struct_output_becomes_builtins() -> None:
    @tool(blocking=False)
    def origin() -> Point:
        return Point(0, 0)

    assert anyio.run(origin.invoke, {}) == {"x": 0, "y": 0}


def test_exception_becomes_node_error_with_type_and_message() -> None:
    @tool
    def broken(n: int) -> int:
        raise ValueError(f"bad n {n}")

    with pytest.raises(NodeError) as info:
        anyio.run(broken.invoke, {"n": 4})
    assert info.value.message == "ValueError: bad n 4"
    assert type(info.value) is NodeError


def test_sync_tool_runs_in_a_worker_thread_unless_non_blocking() -> None:
    main = threading.get_ident()

    def where(args: dict[str, Any]) -> bool:
        return threading.get_ident() == main

    assert anyio.run(Tool("t", where).invoke, {}) is False
    assert anyio.run(Tool("t", where, blocking=False).invoke, {}) is True


def test_async_tool_timeout_raises_node_timeout() -> None:
    async def forever(args: dict[str, Any]) -> None:
        await anyio.sleep_forever()

    t = Tool("forever", forever, timeout=0.05)
    with pytest.raises(NodeTimeout, match=r"^tool 'forever' timed out after 0.05 s$"):
        anyio.run(t.invoke, {})


def test_thread_ignoring_the_timeout_is_abandoned() -> None:
    release = threading.Event()
    finished = threading.Event()

    def stuck(args: dict[str, Any]) -> str:
        release.wait(10)
        finished.set()
        return "late"

    t = Tool("stuck", stuck, timeout=0.05)
    try:
        with pytest.raises(NodeTimeout):
            anyio.run(t.invoke, {})
        assert not finished.is_set()
    finally:
        release.set()
    assert finished.wait(10)


def test_cancellation_propagates_out_of_invoke() -> None:
    started = anyio.Event()
    after: list[str] = []

    async def waits(args: dict[str, Any]) -> None:
        started.set()
        await anyio.sleep_forever()

    t = Tool("waits", waits)

    async def main() -> None:
        with anyio.fail_after(5):
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    try:
                        await t.invoke({})
                    except anyio.get_cancelled_exc_class():
                        after.append("cancelled")
                        raise

                tg.start_soon(call)
                await started.wait()
                tg.cancel_scope.cancel()

    anyio.run(main)
    assert after == ["cancelled"]


def test_output_over_the_tools_cap_fails_naming_size_and_cap() -> None:
    t = Tool("blob", lambda args: "x" * 100, max_output_bytes=50, blocking=False)
    with pytest.raises(
        NodeError, match=r"102 bytes of output, over its max_output_bytes cap of 50"
    ):
        anyio.run(t.invoke, {})


def test_unknown_side_effects_is_refused() -> None:
    with pytest.raises(ValueError, match="side_effects must be one of"):
        Tool("t", lambda args: None, side_effects="network")


def test_registry_suggests_close_names_and_refuses_duplicates() -> None:
    reg = ToolRegistry([Tool("read_file", lambda a: None), Tool("write_file", lambda a: None)])
    assert reg.get("reed_file") is None
    assert reg.suggest("reed_file")[0] == "read_file"
    assert reg.names() == ["read_file", "write_file"]
    with pytest.raises(ValueError, match="registered twice"):
        reg.register(Tool("read_file", lambda a: None))


def test_load_tools_enables_only_the_named_packs() -> None:
    packs = {
        "a": ToolPack("a", "", lambda config: [Tool("one", lambda x: 1)]),
        "b": ToolPack("b", "", lambda config: [Tool("two", lambda x: 2)]),
    }
    reg = load_tools(HostConfig(tools=("b",)), packs=packs)
    assert reg.names() == ["two"]


def test_unknown_pack_names_the_known_ones() -> None:
    with pytest.raises(
        ValueError, match=r"unknown tool pack 'nope'; known packs: bench, conformance"
    ):
        load_tools(HostConfig(tools=("nope",)))


def test_installed_packs_load_through_entry_points() -> None:
    reg = load_tools(HostConfig(tools=("conformance", "bench", "text", "json", "fs")))
    assert {"echo", "flaky", "noop", "sleep_ms", "word_count", "csv_parse", "glob"} <= set(
        reg.names()
    )


def test_a_pack_named_unlike_its_entry_point_loads_by_the_entry_point_with_a_warning() -> None:
    from structlog.testing import capture_logs

    packs = {"hash": ToolPack("size", "", lambda config: [Tool("file_size", lambda x: 1)])}
    with capture_logs() as logs:
        reg = load_tools(HostConfig(tools=("hash",)), packs=packs)
    assert reg.names() == ["file_size"]
    assert [(e["log_level"], e["entry_point"], e["pack_name"]) for e in logs] == [
        ("warning", "hash", "size")]
    assert "--tools uses the entry point's" in logs[0]["event"]
    with capture_logs() as same:
        load_tools(HostConfig(tools=("size",)), packs={"size": packs["hash"]})
    assert same == []


def test_a_tool_is_cacheable_when_free_of_effects_unless_it_says_otherwise() -> None:
    def f(args: dict[str, Any]) -> Any:
        return args

    assert Tool("a", f).cacheable is True
    assert Tool("b", f, side_effects="read").cacheable is False
    assert Tool("c", f, side_effects="read", cacheable=True).cacheable is True
    assert Tool("d", f, cacheable=False).cacheable is False
    assert Tool("e", f, side_effects="write").idempotent is False
    made = tool(f, name="g", side_effects="write", idempotent=True, cacheable=False)
    assert (made.idempotent, made.cacheable, made.side_effects) == (True, False, "write")


def test_an_input_the_schema_refuses_carries_the_invalid_input_code() -> None:
    @tool(blocking=False)
    def add(a: int, b: int) -> int:
        return a + b

    with pytest.raises(NodeError) as info:
        anyio.run(add.invoke, {"a": 1})
    assert info.value.code == "invalid_input"
    assert info.value.message == "tool 'add': input field 'b' is required"
    assert info.value.retryable is False
