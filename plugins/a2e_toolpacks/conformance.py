"""The ``conformance`` tool pack: the deterministic fixture tools of PROTOCOL.md §7.

Every host under conformance test exposes exactly these (``--tools conformance``):
``echo``, ``add``, ``concat``, ``count``, ``upper``, ``sleep``, ``fail``, ``big``, ``flaky``.
All but ``sleep`` are cheap and run on the event loop; ``sleep`` is async and cancellable.
"""

from __future__ import annotations

import threading
from typing import Annotated, Any, TypedDict

import anyio
import msgspec

from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.tools import Tool, ToolPack, tool

__all__ = ["PACK", "make_tools", "reset_flaky"]

Number = int | float


class SumOut(TypedDict):
    sum: Number


class TextOut(TypedDict):
    text: str


class CountOut(TypedDict):
    count: int


class SleepOut(TypedDict):
    slept: Number
    value: Any


class DataOut(TypedDict):
    data: str


class AttemptsOut(TypedDict):
    attempts: int


@tool(blocking=False)
def echo(args: dict[str, Any]) -> dict[str, Any]:
    """Return the input object unchanged."""
    return args


@tool(blocking=False)
def add(a: Number, b: Number) -> SumOut:
    """{"a": number, "b": number} → {"sum": a + b}."""
    return {"sum": a + b}


@tool(blocking=False)
def concat(parts: list[str]) -> TextOut:
    """{"parts": [str, …]} → {"text": "".join(parts)}."""
    return {"text": "".join(parts)}


@tool(blocking=False)
def count(items: list[Any]) -> CountOut:
    """{"items": [...]} → {"count": len(items)}."""
    return {"count": len(items)}


@tool(blocking=False)
def upper(text: str) -> TextOut:
    """{"text": str} → {"text": text.upper()}."""
    return {"text": text.upper()}


@tool
async def sleep(seconds: Number, value: Any = None) -> SleepOut:
    """Wait `seconds` (float seconds), then {"slept": seconds, "value": value}; cancellable."""
    if seconds < 0:
        raise NodeError(f"sleep: seconds must be >= 0, got {seconds}")
    await anyio.sleep(seconds)
    return {"slept": seconds, "value": value}


@tool(blocking=False)
def fail(message: str) -> None:
    """Fail the node with exactly `message`."""
    raise NodeError(message)


@tool(blocking=False)
def big(bytes: Annotated[int, msgspec.Meta(ge=0)]) -> DataOut:  # noqa: A002 - the §7 field
    """{"bytes": int} → {"data": "x" * bytes}."""
    return {"data": "x" * bytes}


_flaky_calls: dict[str, int] = {}
_flaky_lock = threading.Lock()


@tool(blocking=False)
def flaky(key: str, failures: Annotated[int, msgspec.Meta(ge=0)]) -> AttemptsOut:
    """Fail the first `failures` calls for `key` in this process, then {"attempts": n}."""
    with _flaky_lock:
        n = _flaky_calls.get(key, 0) + 1
        _flaky_calls[key] = n
    if n <= failures:
        raise NodeError(
            f"flaky: call {n} for key {key!r} fails on purpose ({failures} failures asked); "
            f"retry it"
        )
    return {"attempts": n}


def reset_flaky() -> None:
    """Forget every ``flaky`` counter (tests)."""
    with _flaky_lock:
        _flaky_calls.clear()


def make_tools(config: HostConfig) -> list[Tool]:
    """The §7 fixture tools (they read nothing from ``config``)."""
    return [echo, add, concat, count, upper, sleep, fail, big, flaky]


PACK = ToolPack(
    name="conformance",
    description="Deterministic fixture tools of PROTOCOL.md §7.",
    factory=make_tools,
)
