"""Skills that fan out share the request's concurrency (PROTOCOL.md §6 ``max_concurrency``):
once the spare slots are taken the expansion runs depth-first, so the nodes in flight —
and the sub-chain runs alive — stay bounded, whatever the breadth (issue 12.7)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from a2e_host.client import spawn_stdio
from a2e_host.messages import ChainEvent, ChainResponse

CLI = [sys.executable, "-m", "a2e_host"]
LEVELS, COPIES = 6, 4  # 1,365 skill nodes and 1,024 leaves below one top node


def write_fanout(skills: Path) -> None:
    for level in range(LEVELS):
        if level == LEVELS - 1:
            nodes: list[dict[str, Any]] = [
                {"node_id": "leaf", "kind": "tool", "name": "echo", "input": {"leaf": level}}
            ]
        else:
            nodes = [{"node_id": f"c{k}", "kind": "skill", "name": f"s{level + 1}"}
                     for k in range(COPIES)]
        skill = {"name": f"s{level}", "description": f"level {level}",
                 "entry_node": nodes[0]["node_id"], "nodes": nodes}
        (skills / f"s{level}.json").write_text(json.dumps(skill), encoding="utf-8")


def peak_in_flight(events: list[ChainEvent]) -> int:
    """The most nodes (any depth) that had started and not ended at one point."""
    live = peak = 0
    for event in events:
        if event.phase == "start":
            live += 1
            peak = max(peak, live)
        elif event.phase in ("done", "error"):
            live -= 1
    return peak


@pytest.mark.asyncio
async def test_a_skill_fan_out_runs_within_the_requests_concurrency(tmp_path: Path) -> None:
    write_fanout(tmp_path)
    argv = [*CLI, "stdio", "--tools", "conformance", "--skills", str(tmp_path)]
    with anyio.fail_after(120):
        async with spawn_stdio(argv, stderr="capture", agent_caps=("chains", "skill"),
                               limits={"max_concurrency": 4}) as client:
            messages = [m async for m in client.run_chain(
                [{"node_id": "top", "kind": "skill", "name": "s0"}], "top")]
    response = messages[-1]
    assert isinstance(response, ChainResponse) and response.success, response
    events = [m for m in messages if isinstance(m, ChainEvent)]
    leaves = [e for e in events if e.node_id.endswith("/leaf") and e.phase == "done"]
    assert len(leaves) == COPIES ** (LEVELS - 1)
    # 4 request-wide workers, each at the head of a depth-first path of at most
    # LEVELS + 1 runs that each hold one node in flight; unbounded, all 2,390 would be
    peak = peak_in_flight(events)
    assert peak <= 4 * (LEVELS + 1), peak
