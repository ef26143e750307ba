"""A ``proc`` node in flight when its host stopped (PROTOCOL.md §5 Resume; issue 17: "a
tool or proc that had started but not finished re-runs only if … the node opts in"): it
ends ``interrupted`` and its process is not started again, unless the node sets
``resume: "rerun"``; resumed from a stored prefix of the run's log, in process."""

from __future__ import annotations

from typing import Any

import pytest

from a2e_host.chains.messages import ChainNode, ChainRequest
from a2e_host.chains.nodes import NodeContext
from a2e_host.chains.validation import ChainPlan, validate_chain
from a2e_host.limits import Limits, SessionLimits
from a2e_host.store import StoredFrame
from tests.support.chains import SCHEDULER_TOOLS, FakeCatalog
from tests.support.resume import check_resumed_stream, data_of, run_durable


class Spawner:
    """Stands in for the ``proc`` executor: records each start (display id, key)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def __call__(self, node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
        self.calls.append((ctx.node_id, ctx.idempotency_key))
        return {"exit_code": 0, "stdout": "ran\n", "stderr": ""}


async def echo(node: ChainNode, args: dict[str, Any], ctx: NodeContext) -> Any:
    return args


def plan(resume: str = "") -> ChainPlan:
    proc: dict[str, Any] = {"node_id": "p", "kind": "proc", "next_node": "c",
                            "input": {"argv": ["sh", "-c", "echo ran"]}}
    if resume:
        proc["resume"] = resume
    nodes = [{"node_id": "a", "kind": "tool", "name": "echo", "input": {"n": 1},
              "next_node": "p"}, proc,
             {"node_id": "c", "kind": "tool", "name": "echo", "input": {"n": 2}}]
    request = ChainRequest(id="req-1", nodes=[ChainNode(**n) for n in nodes], entry_node="a")
    return validate_chain(request, FakeCatalog(SCHEDULER_TOOLS, ()), SessionLimits(Limits()),
                          granted=frozenset({"chains", "proc"}))


def cut_after_start_of(frames: list[StoredFrame], node_id: str) -> list[StoredFrame]:
    for i, f in enumerate(frames):
        if (f.node_id, f.phase) == (node_id, "start"):
            return frames[: i + 1]
    raise AssertionError(f"no start of {node_id}")


@pytest.mark.asyncio
async def test_an_in_flight_proc_node_ends_interrupted_and_its_process_is_not_started_again(
) -> None:
    first_spawner = Spawner()
    first = await run_durable(plan(), {"tool": echo, "proc": first_spawner})
    assert first.response is not None and first.response.success
    prefix = cut_after_start_of(first.frames, "p")
    spawner = Spawner()
    resumed = await run_durable(plan(), {"tool": echo, "proc": spawner}, prefix=prefix,
                                idempotent=lambda name: True)
    assert spawner.calls == [], "a proc node in flight never starts its process again"
    assert [(e.node_id, e.phase) for e in resumed.events] == [("p", "error")]
    assert data_of(resumed.events[0]) == {"resumed": True}
    assert resumed.response is not None and resumed.response.error is not None
    assert (resumed.response.error.code, resumed.response.error.node_id) == (
        "interrupted", "p")
    check_resumed_stream([*first.events[: len(prefix)], *resumed.events], "req-1")


@pytest.mark.asyncio
async def test_an_in_flight_proc_node_with_resume_rerun_runs_again_with_its_key() -> None:
    first_spawner = Spawner()
    first = await run_durable(plan("rerun"), {"tool": echo, "proc": first_spawner})
    prefix = cut_after_start_of(first.frames, "p")
    spawner = Spawner()
    resumed = await run_durable(plan("rerun"), {"tool": echo, "proc": spawner}, prefix=prefix)
    assert spawner.calls == first_spawner.calls, "once more, with the same idempotency key"
    assert [(e.node_id, e.phase) for e in resumed.events] == [
        ("p", "done"), ("c", "start"), ("c", "done")]
    assert data_of(resumed.events[0]) == {"resumed": True}
    assert resumed.response is not None and resumed.response.success
    check_resumed_stream([*first.events[: len(prefix)], *resumed.events], "req-1")
