"""A skill node's ``timeout`` (PROTOCOL.md §5 Recovery): the sub-chain under it is
cancelled with it, each inner node still ends with exactly one terminal event, and only
the skill node fails. On the real stdio host with a declarative skill."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from a2e_host.chains.messages import ChainEvent, ChainResponse
from a2e_host.client import spawn_stdio
from tests.support.process import CLI, STARTUP

SLOW = """\
name: slow
description: Sleeps far longer than its caller waits.
entry_node: nap
nodes:
  - {node_id: nap, kind: tool, name: sleep, input: {seconds: 30}}
"""


@pytest.mark.asyncio
async def test_a_skill_over_its_timeout_cancels_its_sub_chain_and_fails_alone(
    tmp_path: Path,
) -> None:
    (tmp_path / "slow.yaml").write_text(SLOW, encoding="utf-8")
    argv = [*CLI, "stdio", "--tools", "conformance", "--skills", str(tmp_path)]
    nodes = [
        {"node_id": "s", "kind": "skill", "name": "slow", "timeout": 0.3, "on_error": "skip",
         "next_node": "after"},
        {"node_id": "after", "kind": "tool", "name": "echo", "input_map": {"s": "s.status"}},
    ]
    with anyio.fail_after(30):
        async with spawn_stdio(argv, stderr="capture", agent_caps=("chains", "skill"),
                               handshake_timeout=STARTUP) as client:
            messages = [m async for m in client.run_chain(nodes, "s")]
    events = [m for m in messages if isinstance(m, ChainEvent)]
    response = messages[-1]
    assert isinstance(response, ChainResponse)
    assert [(e.node_id, e.phase) for e in events] == [
        ("s", "start"), ("s/nap", "start"), ("s/nap", "error"), ("s", "error"),
        ("after", "start"), ("after", "done"),
    ]
    assert events[3].error == ("node 's' timed out after 0.3 s (its timeout); raise the "
                               "node's timeout or make the work smaller")
    assert events[3].data["errors"][0]["code"] == "timeout"
    assert events[2].error.startswith("cancelled:")
    assert response.success is True
    assert response.outputs == {"after": {"s": "error"}}
    assert response.duration_ms < 10_000
