"""Runs of chains whose nodes have recovery fields (PROTOCOL.md §5 Recovery), in process:
real :class:`~a2e_host.tools.Tool` objects behind a real toolbox, a fake clock that waits
without sleeping, and the events each run sent. Every run is bounded by :data:`WAIT`."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import msgspec

from a2e_host.chains.messages import ChainEvent, ChainNode, ChainRequest, ChainResponse
from a2e_host.chains.run_state import Clock
from a2e_host.chains.scheduler import ChainRunner
from a2e_host.chains.step_cache import StepCache
from a2e_host.chains.toolbox import Toolbox
from a2e_host.chains.validation import ChainPlan, validate_chain
from a2e_host.exceptions import NodeError
from a2e_host.limits import Limits, SessionLimits
from a2e_host.messages import Message
from a2e_host.tools import Tool, ToolRegistry
from tests.support.reference_interpreter import check_event_stream

WAIT = 10.0  # seconds: the bound on every run


class FakeClock:
    """A clock whose ``sleep`` only moves its time on (after one checkpoint).

    Attributes:
        now_s: the current time, seconds.
        sleeps: every wait asked, in order.
        draws: every ``(low, high)`` a full jitter drew between.
        fraction: where in ``[low, high]`` a draw lands (0.5: the middle).
    """

    def __init__(self, start: float = 1000.0, fraction: float = 0.5) -> None:
        self.now_s = start
        self.sleeps: list[float] = []
        self.draws: list[tuple[float, float]] = []
        self.fraction = fraction

    def now(self) -> float:
        return self.now_s

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now_s += seconds
        await anyio.lowlevel.checkpoint()

    def uniform(self, low: float, high: float) -> float:
        self.draws.append((low, high))
        return low + (high - low) * self.fraction

    @property
    def clock(self) -> Clock:
        return Clock(now=self.now, sleep=self.sleep, uniform=self.uniform)


class Flaky:
    """A tool function failing its first ``failures`` calls (retryable unless told
    otherwise), then answering ``{"calls": n}``; ``calls`` counts every call."""

    def __init__(self, failures: int, *, retryable: bool = True, code: str | None = None,
                 error: type[Exception] = NodeError) -> None:
        self.failures = failures
        self.retryable = retryable
        self.code = code
        self.error = error
        self.calls = 0
        self.inputs: list[dict[str, Any]] = []

    def __call__(self, args: dict[str, Any]) -> dict[str, Any]:
        self.calls += 1
        self.inputs.append(dict(args))
        if self.calls <= self.failures:
            message = f"call {self.calls} fails"
            if self.error is NodeError:
                raise NodeError(message, retryable=self.retryable, code=self.code)
            raise self.error(message)
        return {"calls": self.calls}


def make_tool(name: str, fn: Callable[..., Any], **options: Any) -> Tool:
    """A tool whose input is any object, run on the loop (``blocking=False``) unless
    ``fn`` is async."""
    options.setdefault("blocking", False)
    return Tool(name, fn, **options)


@dataclass
class Run:
    """What one run sent: its events and its response."""

    events: list[ChainEvent]
    response: ChainResponse
    runner: ChainRunner

    def phases(self, node_id: str | None = None) -> list[tuple[str, str, str]]:
        """``(node_id, phase, kind)`` of every event (of ``node_id`` only, when given)."""
        return [(e.node_id, e.phase, e.kind) for e in self.events
                if node_id is None or e.node_id == node_id]

    def last(self, node_id: str) -> ChainEvent:
        """The node's terminal event."""
        return [e for e in self.events if e.node_id == node_id][-1]

    def progress(self, node_id: str) -> list[dict[str, Any]]:
        """The ``data`` of the node's progress events, in order."""
        return [e.data for e in self.events if e.node_id == node_id and e.kind == "progress"]


@dataclass
class Host:
    """Tools, a step cache and a fake clock shared by several runs (as a host shares them)."""

    tools: list[Tool]
    clock: FakeClock = field(default_factory=FakeClock)
    cache: StepCache | None = field(default_factory=StepCache)
    limits: Limits = field(default_factory=Limits)

    def __post_init__(self) -> None:
        self.toolbox = Toolbox(ToolRegistry(self.tools))

    def plan(self, nodes: list[dict[str, Any]], **fields: Any) -> ChainPlan:
        request = ChainRequest(
            id="r", nodes=[msgspec.convert({"kind": "tool", **n}, ChainNode) for n in nodes],
            entry_node=nodes[0]["node_id"], **fields,
        )
        return validate_chain(request, self.toolbox, SessionLimits(self.limits),
                              granted=frozenset({"chains"}))

    async def run(self, nodes: list[dict[str, Any]], **fields: Any) -> Run:
        plan = self.plan(nodes, **fields)
        sent: list[Message] = []
        runner = ChainRunner(plan, executors=self.toolbox.executors, limits=self.limits,
                             emit=sent.append, clock=self.clock.clock,
                             tool_of=self.toolbox.tools.get, step_cache=self.cache)
        with anyio.fail_after(WAIT):
            response = await runner.run_to_response(time.monotonic())
        assert sent[-1] is response
        events = [m for m in sent if isinstance(m, ChainEvent)]
        check_event_stream(events, "r")
        return Run(events, response, runner)
