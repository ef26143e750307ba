"""The ``bench`` tool pack: ``noop`` and ``sleep_ms``, for measuring the scheduler.

Both are async and take "any object" input (no validation work), so a chain of them
measures the host's own overhead. Both are pure and declared ``idempotent``.

* ``noop``: {"x": any} → x unchanged (null when absent).
* ``sleep_ms``: {"ms": number, "x"?: any} → waits ``ms`` milliseconds, then x (or null).
"""

from __future__ import annotations

from typing import Any

import anyio

from a2e_host.config import HostConfig
from a2e_host.exceptions import NodeError
from a2e_host.tools import Tool, ToolPack

__all__ = ["PACK", "make_tools"]


async def _noop(args: dict[str, Any]) -> Any:
    return args.get("x")


async def _sleep_ms(args: dict[str, Any]) -> Any:
    ms = args.get("ms")
    if isinstance(ms, bool) or not isinstance(ms, int | float) or ms < 0:
        raise NodeError(f"tool 'sleep_ms': input field 'ms' must be a number >= 0, got {ms!r}")
    await anyio.sleep(ms / 1000.0)
    return args.get("x")


# Both are pure, so both are declared idempotent: a durable run resumed after a crash may
# run an in-flight one again (PROTOCOL.md §5 Resume) and need not hold its start.
noop = Tool("noop", _noop, description="Return input field x unchanged.", idempotent=True)
sleep_ms = Tool("sleep_ms", _sleep_ms, description="Wait ms milliseconds, then return x (or null).",
                idempotent=True)
noop.input_schema = {"type": "object", "properties": {"x": {}}}
sleep_ms.input_schema = {
    "type": "object",
    "properties": {"ms": {"type": "number", "minimum": 0}, "x": {}},
    "required": ["ms"],
}


def make_tools(config: HostConfig) -> list[Tool]:
    """The bench tools (they read nothing from ``config``)."""
    return [noop, sleep_ms]


PACK = ToolPack(name="bench", description="Benchmark tools: noop, sleep_ms.", factory=make_tools)
