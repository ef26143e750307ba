"""The client library over an in-process host: handshake, streaming, routing, errors."""

from __future__ import annotations

import anyio
import pytest

from a2e_host.chains.messages import ChainEvent, ChainRequest, ChainResponse
from a2e_host.client import ChainRun, HandshakeFailed, HostError, connect_memory
from a2e_host.config import HostConfig
from a2e_host.runtime.host import Host

pytestmark = pytest.mark.asyncio

ADD_THEN_UPPER = [
    {
        "node_id": "add",
        "kind": "tool",
        "name": "add",
        "input": {"a": 2, "b": 40},
        "next_node": "say",
    },
    {
        "node_id": "say",
        "kind": "tool",
        "name": "concat",
        "input_map": {"parts": "['sum=', to_string(add.output.sum)]"},
    },
]
NAP = [{"node_id": "nap", "kind": "tool", "name": "sleep", "input": {"seconds": 30}}]


def conformance_host() -> Host:
    return Host(HostConfig(tools=("conformance",)))


async def collect(run: ChainRun) -> tuple[list[ChainEvent], ChainResponse]:
    events: list[ChainEvent] = []
    with anyio.fail_after(20):
        async for message in run:
            if isinstance(message, ChainEvent):
                events.append(message)
    assert run.response is not None
    return events, run.response


async def wait_for_start(run: ChainRun, node_id: str) -> ChainEvent:
    with anyio.fail_after(20):
        async for message in run:
            if isinstance(message, ChainEvent) and message.node_id == node_id:
                return message
    raise AssertionError(f"{node_id} never started")


async def test_handshake_exposes_session_features_and_limits() -> None:
    async with connect_memory(conformance_host(), agent_caps=["chains"]) as client:
        assert len(client.session_id) >= 16
        assert "chains" in client.accepted_caps
        assert "chain/cancel" in client.features
        assert client.limits["max_nodes"] == 10_000
        assert client.max_parallel == 4


async def test_handshake_session_limits_are_lowered_as_asked() -> None:
    async with connect_memory(conformance_host(), limits={"max_nodes": 7}) as client:
        assert client.limits["max_nodes"] == 7


async def test_run_chain_streams_events_then_the_response() -> None:
    async with connect_memory(conformance_host()) as client:
        events, response = await collect(client.run_chain(ADD_THEN_UPPER, "add"))
    assert [(e.node_id, e.phase) for e in events] == [
        ("add", "start"),
        ("add", "done"),
        ("say", "start"),
        ("say", "done"),
    ]
    assert [e.seq for e in events] == [1, 2, 3, 4]
    assert {e.req_id for e in events} == {response.req_id}
    assert response.success is True
    assert response.final_output == {"text": "sum=42"}
    assert response.outputs["add"] == {"sum": 42}


async def test_concurrent_chains_on_one_client_are_routed_by_request() -> None:
    async with connect_memory(conformance_host()) as client:
        long = client.run_chain(NAP, "nap", timeout=60)
        started = await wait_for_start(long, "nap")
        quick_events, quick = await collect(client.run_chain(ADD_THEN_UPPER, "add"))
        assert quick.success is True
        assert all(e.req_id == quick.req_id for e in quick_events)
        assert long.response is None  # still sleeping while the quick chain finished
        await long.cancel()
        rest, cancelled = await collect(long)
    assert started.req_id == long.req_id
    assert [(e.node_id, e.phase) for e in rest] == [("nap", "error")]
    assert cancelled.success is False
    assert cancelled.error is not None and cancelled.error.code == "cancelled"


async def test_ping_returns_the_host_uptime_in_seconds() -> None:
    host = conformance_host()
    async with connect_memory(host) as client:
        uptime = await client.ping()
    assert 0.0 <= uptime <= host.uptime_seconds


async def test_host_error_is_raised_with_its_wire_code() -> None:
    async with connect_memory(conformance_host()) as client:
        request = ChainRequest(session_id="not-this-session", nodes=[], entry_node="x")
        run = client.send_request(request)
        with pytest.raises(HostError) as caught:
            await collect(run)
    assert caught.value.code == "unknown_session"
    assert caught.value.req_id == request.id


async def test_refused_handshake_raises_with_the_reason() -> None:
    with pytest.raises(HandshakeFailed) as caught:
        async with connect_memory(conformance_host(), agent_caps=["no-such-capability"]):
            raise AssertionError("the handshake should have failed")
    assert caught.value.reason == "no_caps"


async def test_invalid_chain_gets_a_response_without_events() -> None:
    cyclic = [
        {"node_id": "a", "kind": "tool", "name": "echo", "next_node": "b"},
        {"node_id": "b", "kind": "tool", "name": "echo", "next_node": "a"},
    ]
    async with connect_memory(conformance_host()) as client:
        events, response = await collect(client.run_chain(cyclic, "a"))
    assert events == []
    assert response.success is False
    assert response.error is not None and response.error.code == "chain_cycle"
