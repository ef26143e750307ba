"""The client library spawning ``a2e-host stdio``: NDJSON both ways, logs kept apart."""

from __future__ import annotations

import sys

import anyio
import pytest

from a2e_host.chains.messages import ChainEvent
from a2e_host.client import HandshakeFailed, spawn_stdio
from tests.support.process import STARTUP

pytestmark = pytest.mark.asyncio

STDIO = [sys.executable, "-m", "a2e_host", "stdio", "--tools", "conformance"]


async def test_spawned_host_runs_a_chain_and_answers_ping() -> None:
    nodes = [
        {"node_id": "up", "kind": "tool", "name": "upper", "input_map": {"text": "input.word"}},
    ]
    with anyio.fail_after(60):
        async with spawn_stdio(STDIO, agent_caps=["chains"], stderr="capture",
                               handshake_timeout=STARTUP) as client:
            phases = []
            async for message in client.run_chain(nodes, "up", initial_input={"word": "ndjson"}):
                if isinstance(message, ChainEvent):
                    phases.append((message.node_id, message.phase))
                else:
                    response = message
            uptime = await client.ping()
            process = client.transport.process  # type: ignore[attr-defined]
    assert phases == [("up", "start"), ("up", "done")]
    assert response.success is True
    assert response.final_output == {"text": "NDJSON"}
    assert uptime >= 0.0
    assert process.returncode == 0  # stdin EOF made the host exit by itself


async def test_spawned_host_refusing_the_handshake_is_reported() -> None:
    with anyio.fail_after(60), pytest.raises(HandshakeFailed) as caught:
        async with spawn_stdio(STDIO, agent_caps=["nothing-served"], stderr="capture",
                               handshake_timeout=STARTUP):
            raise AssertionError("the handshake should have failed")
    assert caught.value.reason == "no_caps"
