"""The chain engine in process: a fake catalog, validated plans, and scheduler runs with
fake tools (PROTOCOL.md §3-§6, §8). Every run is bounded by :data:`WAIT`."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Collection
from typing import Any

import anyio
import pytest

from a2e_host.chains.messages import ChainEvent, ChainNode, ChainRequest, ChainResponse
from a2e_host.chains.nodes import NodeContext
from a2e_host.chains.scheduler import ChainRunner
from a2e_host.chains.validation import ChainPlan, validate_chain
from a2e_host.exceptions import ChainInvalid, NodeError
from a2e_host.limits import Limits, SessionLimits
from a2e_host.messages import Message
from tests.support.reference_interpreter import check_event_stream

Tool = Callable[[ChainNode, dict[str, Any], NodeContext], Awaitable[Any]]
WAIT = 5.0  # seconds: the bound on every wait that should end at once
#: Every capability a chain's node kinds can need.
ALL_CAPS = frozenset({"chains", "skill", "proc"})
#: The tools the scheduler cases' fake tools answer to.
SCHEDULER_TOOLS = ("echo", "fail", "sleep", "block", "gate", "probe")


class FakeCatalog:
    """What validation asks the host (tool and skill names, the proc policy), fixed."""

    def __init__(
        self,
        tools: Collection[str] = ("echo", "add", "read_file"),
        skills: Collection[str] = ("summarize",),
        proc_refusal: str | None = None,
    ) -> None:
        self.tools = set(tools)
        self.skills = set(skills)
        self.proc_refusal = proc_refusal

    def tool_names(self) -> Collection[str]:
        return self.tools

    def skill_names(self) -> Collection[str]:
        return self.skills

    def check_proc(self, node: ChainNode) -> str | None:
        return self.proc_refusal


# ── validation ──────────────────────────────────────────────────────────────────


def validate(
    nodes: list[dict[str, Any]],
    entry: str = "a",
    *,
    limits: Limits | None = None,
    asked: dict[str, int] | None = None,
    granted: frozenset[str] = ALL_CAPS,
    catalog: FakeCatalog | None = None,
    **fields: Any,
) -> ChainPlan:
    """Validate a chain of ``nodes`` (each a tool node calling ``echo`` unless it says
    otherwise) against :class:`FakeCatalog`; raises :class:`ChainInvalid`."""
    request = ChainRequest(
        nodes=[ChainNode(**{"kind": "tool", "name": "echo", **n}) for n in nodes],
        entry_node=entry, **fields,
    )
    return validate_chain(request, catalog or FakeCatalog(),
                          SessionLimits(limits or Limits(), asked), granted=granted)


def refusal(nodes: list[dict[str, Any]], entry: str = "a", **kw: Any) -> ChainInvalid:
    """The :class:`ChainInvalid` that :func:`validate` must raise."""
    with pytest.raises(ChainInvalid) as info:
        validate(nodes, entry, **kw)
    return info.value


def problems(err: ChainInvalid) -> list[dict[str, Any]]:
    """Every problem a refusal reports (``details.errors``)."""
    errors: list[dict[str, Any]] = err.details["errors"]
    return errors


# ── the scheduler ───────────────────────────────────────────────────────────────


def plan_of(nodes: list[dict[str, Any]], entry: str | None = None, **fields: Any) -> ChainPlan:
    """The plan of request ``req-1`` of ``nodes`` (each a tool node calling ``echo`` unless it
    says otherwise; the entry is the first node unless ``entry``), for
    :data:`SCHEDULER_TOOLS`."""
    request = ChainRequest(
        id="req-1",
        nodes=[ChainNode(**{"kind": "tool", "name": "echo", **n}) for n in nodes],
        entry_node=entry or nodes[0]["node_id"],
        **fields,
    )
    return validate_chain(
        request, FakeCatalog(SCHEDULER_TOOLS, ()), SessionLimits(Limits()),
        granted=frozenset({"chains"}),
    )


async def echo_tool(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
    """``echo`` returns its input; ``fail`` raises with ``message``."""
    if node.name == "fail":
        raise NodeError(str(args.get("message", "boom")))
    return args


class Run:
    """One chain run's output: events, the response, and when the response was sent."""

    def __init__(self, sent: list[Message], response_at: float) -> None:
        self.sent = sent
        self.response_at = response_at
        assert sent and isinstance(sent[-1], ChainResponse), "the chain/resp comes last"
        assert all(isinstance(m, ChainEvent) for m in sent[:-1]), "only events before it"
        self.events: list[ChainEvent] = [m for m in sent[:-1] if isinstance(m, ChainEvent)]
        self.response: ChainResponse = sent[-1]

    @property
    def pairs(self) -> list[tuple[str, str]]:
        return [(e.node_id, e.phase) for e in self.events]

    def of(self, node_id: str) -> list[str]:
        return [e.phase for e in self.events if e.node_id == node_id]

    def event(self, node_id: str, phase: str) -> ChainEvent:
        found = [e for e in self.events if e.node_id == node_id and e.phase == phase]
        assert len(found) == 1, f"{node_id} has {len(found)} {phase} events: {self.pairs}"
        return found[0]


def check_stream(run: Run) -> None:
    """PROTOCOL.md §5: gapless seq from 1; one terminal event per started node; ..."""
    check_event_stream(run.events, "req-1")


async def run_plan(
    plan: ChainPlan,
    tool: Tool = echo_tool,
    *,
    limits: Limits | None = None,
    during: Callable[[ChainRunner], Awaitable[None]] | None = None,
    watch: Callable[[Message], None] | None = None,
    check: bool = True,
    wait: float = WAIT,
) -> Run:
    """Run ``plan`` to its response (within ``wait`` seconds); ``during(runner)`` runs
    alongside (e.g. to cancel), ``watch`` sees each message as it is emitted."""
    sent: list[Message] = []
    response_at: list[float] = []

    def emit(message: Message) -> None:
        sent.append(message)
        if watch is not None:
            watch(message)
        if isinstance(message, ChainResponse):
            response_at.append(time.monotonic())

    runner = ChainRunner(plan, executors={"tool": tool}, limits=limits or Limits(), emit=emit)
    with anyio.fail_after(wait):
        async with anyio.create_task_group() as tg:
            if during is not None:
                tg.start_soon(during, runner)
            await runner.run_to_response(time.monotonic())
    run = Run(sent, response_at[0])
    if check:
        check_stream(run)
    return run
