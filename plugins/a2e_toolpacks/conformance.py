"""The ``conformance`` tool pack: the deterministic fixture tools of PROTOCOL.md §7.

Every host under conformance test exposes exactly these (``--tools conformance``):
``echo``, ``add``, ``concat``, ``count``, ``upper``, ``sleep``, ``fail``, ``big``, ``flaky``,
``progress``. ``progress`` reports through the tool context (:func:`a2e_host.tools.report`).
``flaky``'s failures are retryable and it is never answered from the step cache. All
but ``sleep`` are cheap and run on the event loop (``upper`` of a long text runs in a
worker thread); ``sleep`` is async and cancellable. ``big`` and ``concat`` refuse an output
over the node's ``max_output_bytes`` before building it (``chain_limit``).
"""

from __future__ import annotations

import threading
from typing import Annotated, Any, TypedDict

import anyio
import anyio.lowlevel
import msgspec

from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.tools import Tool, ToolPack, report, tool

from ._caps import offload, output_cap, refuse_output

__all__ = ["PACK", "make_tools", "reset_flaky"]

Number = int | float


_TEXT_OVERHEAD = len('{"text":""}')
_DATA_OVERHEAD = len('{"data":""}')


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


class ProgressOut(TypedDict):
    steps: int
    reported: int


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
    """{"parts": [str, …]} → {"text": "".join(parts)}; refused (``chain_limit``) when the
    text would be over ``max_output_bytes``."""
    chars = sum(map(len, parts))  # parts may repeat one long string: count first
    if chars + _TEXT_OVERHEAD > output_cap():
        refuse_output("concat", chars + _TEXT_OVERHEAD, "the output", at_least=True)
    return {"text": "".join(parts)}


@tool(blocking=False)
def count(items: list[Any]) -> CountOut:
    """{"items": [...]} → {"count": len(items)}."""
    return {"count": len(items)}


@tool
async def upper(text: str) -> TextOut:
    """{"text": str} → {"text": text.upper()}."""
    return {"text": await offload(len(text), str.upper, text)}


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
    """{"bytes": int} → {"data": "x" * bytes}; refused (``chain_limit``) when that output
    would be over ``max_output_bytes``, before it is built."""
    size = bytes + _DATA_OVERHEAD
    if size > output_cap():
        refuse_output("big", size, "the output")
    return {"data": "x" * bytes}


_flaky_calls: dict[str, int] = {}
_flaky_lock = threading.Lock()


@tool(blocking=False, cacheable=False)
def flaky(key: str, failures: Annotated[int, msgspec.Meta(ge=0)]) -> AttemptsOut:
    """Fail the first `failures` calls for `key` in this process, then {"attempts": n}.

    Each failure is a retryable node error (``retryable: true``), so a node's ``retry``
    tries it again (PROTOCOL.md §5 Recovery); it is never cached (its answer changes).
    """
    with _flaky_lock:
        n = _flaky_calls.get(key, 0) + 1
        _flaky_calls[key] = n
    if n <= failures:
        raise NodeError(
            f"flaky: call {n} for key {key!r} fails on purpose ({failures} failures asked); "
            f"retry it",
            retryable=True,
        )
    return {"attempts": n}


@tool(streaming=True, cacheable=False, tags=("fixture", "progress"))
async def progress(
    steps: Annotated[int, msgspec.Meta(ge=0, le=100_000)],
    delay: Annotated[float, msgspec.Meta(ge=0, le=60)] = 0.0,
) -> ProgressOut:
    """Report `steps` progress events (`pct` = 100·i/steps, `message` "step i of steps"),
    waiting `delay` float seconds before each; then {"steps", "reported"}: how many
    reports were sent (the host drops those past its per-node cap)."""
    sent = 0
    for i in range(1, steps + 1):
        if delay:
            await anyio.sleep(delay)
        elif i % 64 == 0:
            await anyio.lowlevel.checkpoint()
        if report("progress", {"pct": i * 100 // steps, "message": f"step {i} of {steps}"}):
            sent += 1
    return {"steps": steps, "reported": sent}


def reset_flaky() -> None:
    """Forget every ``flaky`` counter (tests)."""
    with _flaky_lock:
        _flaky_calls.clear()


def make_tools(config: HostConfig) -> list[Tool]:
    """The §7 fixture tools (they read nothing from ``config``)."""
    return [echo, add, concat, count, upper, sleep, fail, big, flaky, progress]


PACK = ToolPack(
    name="conformance",
    description="Deterministic fixture tools of PROTOCOL.md §7.",
    factory=make_tools,
)
