"""``serve_ws`` / ``open_ws_server``: a real ``a2e-host serve`` child on a free 127.0.0.1
port, a real WebSocket client connected to it, and an orderly stop."""

from __future__ import annotations

import socket

import anyio
import pytest

from a2e_host.chains.messages import ChainEvent, ChainResponse
from a2e_host.client import ServerFailed, open_ws_server, serve_ws
from a2e_host.messages import ErrorMessage

pytestmark = pytest.mark.asyncio

UPPER = [{"node_id": "up", "kind": "tool", "name": "upper", "input_map": {"text": "input.w"}}]


async def test_serve_ws_yields_a_connected_client_and_stops_the_server() -> None:
    with anyio.fail_after(60):
        async with serve_ws(["--tools", "conformance"], agent_caps=["chains"]) as client:
            assert client.url.startswith("ws://127.0.0.1:")
            assert client.url != "ws://127.0.0.1:8765"  # a free port, not the default
            assert client.accepted_caps == ["chains"]
            messages = [m async for m in client.run_chain(UPPER, "up", initial_input={"w": "a"})]
            server = client.server
            assert server is not None and server.returncode is None  # running
    assert [type(m) for m in messages] == [ChainEvent, ChainEvent, ChainResponse]
    response = messages[-1]
    assert isinstance(response, ChainResponse)
    assert response.final_output == {"text": "A"}
    assert server.returncode == 0  # SIGTERM: the orderly stop
    assert any("listening on" in line for line in server.stderr_lines)


async def test_a_server_that_cannot_start_raises_server_failed_with_its_reason() -> None:
    with anyio.fail_after(60), pytest.raises(ServerFailed) as caught:
        async with serve_ws(["--tools", "no-such-pack"]):
            pytest.fail("the block must not run")
    assert "exited with status 2" in str(caught.value)
    assert "unknown tool pack 'no-such-pack'" in str(caught.value)


async def test_one_server_takes_several_clients_and_a_late_cancel_lands_in_unrouted() -> None:
    with anyio.fail_after(60):
        async with open_ws_server(["--tools", "conformance"]) as server:
            async with server.connect(agent_caps=["chains"]) as first, \
                    server.connect(agent_caps=["chains"]) as second:
                assert first.session_id != second.session_id
                run = first.run_chain(UPPER, "up", initial_input={"w": "b"})
                response = await run.result()
                assert response.success
                await run.cancel()  # the chain has ended: the host's answer has no waiter
                while not first.unrouted:
                    await first.ping()  # the ping's pong comes after the cancel's error
                late = first.unrouted[-1]
                assert isinstance(late, ErrorMessage)
                assert late.code == "invalid_message"
    assert server.returncode == 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.mark.parametrize("form", ["separate", "equals"])
async def test_an_explicit_port_is_honoured_not_replaced_by_a_free_one(form: str) -> None:
    port = free_port()
    args = ["--port", str(port)] if form == "separate" else [f"--port={port}"]
    with anyio.fail_after(60):
        async with serve_ws(args, agent_caps=["chains"]) as client:
            assert client.url == f"ws://127.0.0.1:{port}"
            assert (await client.ping()) >= 0
