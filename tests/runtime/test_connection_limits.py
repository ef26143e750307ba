"""Connections before the handshake are not free (issue 12.11), and a normal WebSocket
close is logged as one (issue 13.8).

In-process through the memory transport (distinct peers injected as addresses), then
against the real ``a2e-host serve`` on 127.0.0.1 with real websockets clients; a second
loopback address (127.0.0.2) plays a different peer."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.datastructures import Headers
from websockets.exceptions import InvalidStatus

from a2e_host.config import HostConfig
from a2e_host.messages import ErrorMessage, HandshakeRequest, HandshakeResponse, Ping, Pong
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import MessageClient, open_memory_client
from tests.support.fakes import FakeChainPlugin
from tests.support.process import CLI, WAIT, HostProcess, open_host
from tests.support.ws import serving_argv as serving
from tests.support.ws import wait_closed

TOKEN = "s3cret"


def make_host(**config: Any) -> Host:
    cfg = HostConfig(**config)
    return Host(cfg, plugins=[FakeChainPlugin(cfg)])


async def next_message(client: MessageClient) -> Any:
    with anyio.fail_after(WAIT):
        return await client.receive()


async def host_closes(client: MessageClient) -> int | None:
    """Wait until the host closes ``client``'s connection; its close code."""
    with anyio.fail_after(WAIT):
        try:
            while True:
                await client.receive()
        except anyio.EndOfStream:
            pass
    return client.close_code


# ── in-process: the handshake deadline and the auth throttle ────────────────────


@pytest.mark.asyncio
async def test_a_connection_without_a_handshake_is_told_and_closed_at_the_deadline() -> None:
    host = make_host(handshake_timeout=0.3)
    async with open_memory_client(host) as client:
        started = anyio.current_time()
        err = await next_message(client)
        waited = anyio.current_time() - started
        code = await host_closes(client)
    assert isinstance(err, ErrorMessage)
    assert (err.code, err.req_id, err.detail) == (
        "handshake_required", "", {"handshake_timeout": 0.3})
    assert "within 0.3 s" in err.message
    assert code == 1008
    assert waited >= 0.3


@pytest.mark.asyncio
async def test_a_refused_no_caps_handshake_does_not_stop_the_deadline() -> None:
    host = make_host(handshake_timeout=0.3)
    async with open_memory_client(host) as client:
        client.send(HandshakeRequest(id="h", agent_caps=["video"]))
        refused = await next_message(client)
        err = await next_message(client)
        assert await host_closes(client) == 1008
    assert isinstance(refused, HandshakeResponse) and refused.reason == "no_caps"
    assert isinstance(err, ErrorMessage) and err.code == "handshake_required"


@pytest.mark.asyncio
async def test_a_session_opened_in_time_outlives_the_deadline() -> None:
    host = make_host(handshake_timeout=0.2)
    async with open_memory_client(host) as client:
        client.send(HandshakeRequest(id="h", agent_caps=["chains"]))
        assert (await next_message(client)).ok
        await anyio.sleep(0.6)  # three deadlines: the host's timer would have fired by now
        client.send(Ping(id="p"))
        pong = await next_message(client)
    assert isinstance(pong, Pong) and pong.req_id == "p"


@pytest.mark.asyncio
async def test_ping_before_auth_is_handshake_required_and_answered_after_it() -> None:
    host = make_host(auth_token=TOKEN)
    async with open_memory_client(host) as client:
        client.send(Ping(id="early"))
        early = await next_message(client)
        client.send(HandshakeRequest(id="h", agent_caps=["chains"], auth_token=TOKEN))
        assert (await next_message(client)).ok
        client.send(Ping(id="late"))
        late = await next_message(client)
    assert isinstance(early, ErrorMessage)
    assert (early.code, early.req_id) == ("handshake_required", "early")
    assert isinstance(late, Pong) and late.req_id == "late"


@pytest.mark.asyncio
async def test_failed_auth_from_one_peer_is_answered_one_per_delay_and_others_are_not_slowed(
) -> None:
    delay = 0.25
    host = make_host(auth_token=TOKEN, auth_failure_delay=delay)
    answered: dict[str, float] = {}

    async def attempt(name: str, peer: str, token: str) -> None:
        async with open_memory_client(host, peer=peer) as client:
            client.send(HandshakeRequest(id=name, agent_caps=["chains"], auth_token=token))
            resp = await next_message(client)
            answered[name] = anyio.current_time() - started
            assert isinstance(resp, HandshakeResponse)
            assert resp.ok is (token == TOKEN), resp
            if not resp.ok:
                assert resp.reason == "auth_failed"
                assert await host_closes(client) == 1008

    started = anyio.current_time()
    async with anyio.create_task_group() as tg:
        for n in range(4):
            tg.start_soon(attempt, f"guess{n}", "198.51.100.9", f"wrong{n}")
        tg.start_soon(attempt, "other", "203.0.113.7", "wrong")
        tg.start_soon(attempt, "right", "198.51.100.9", TOKEN)
    guesses = sorted(answered[f"guess{n}"] for n in range(4))
    assert guesses[-1] >= 4 * delay, answered  # n failures take at least n delays
    for k, at in enumerate(guesses, start=1):
        assert at >= k * delay, answered  # one answer per delay, never two at once
    assert delay <= answered["other"] < guesses[-1], answered  # its own queue
    assert answered["right"] < guesses[0], answered  # a right token is never delayed


@pytest.mark.asyncio
async def test_a_stdio_host_that_gets_no_handshake_says_so_and_exits() -> None:
    host = await open_host([*CLI, "stdio"], A2E_HANDSHAKE_TIMEOUT="0.5")
    async with anyio.create_task_group() as tg:
        tg.start_soon(host.collect_stderr)
        told = await host.receive()
        rest = await host.read_rest()
        assert await host.wait() == 0
    assert (told["type"], told["code"], told["req_id"]) == ("error", "handshake_required", "")
    assert told["detail"] == {"handshake_timeout": 0.5}
    assert rest == b""


# ── the real WebSocket server ───────────────────────────────────────────────────


async def send(ws: ClientConnection, message: dict[str, Any]) -> dict[str, Any]:
    await ws.send(json.dumps(message))
    with anyio.fail_after(WAIT):
        data = await ws.recv()
    assert isinstance(data, str)
    reply: dict[str, Any] = json.loads(data)
    return reply


def hello(**fields: Any) -> dict[str, Any]:
    return {"type": "handshake/req", "id": "h", "agent_caps": ["chains"], **fields}


def log_lines(host: HostProcess, event: str) -> list[dict[str, Any]]:
    lines = []
    for raw in bytes(host.stderr).splitlines():
        if raw.startswith(b"{"):
            line = json.loads(raw)
            if line.get("event") == event:
                lines.append(line)
    return lines


@pytest.mark.asyncio
async def test_idle_connections_past_max_connections_are_refused_then_timed_out_and_an_authorised_client_gets_in(  # noqa: E501
) -> None:
    env = {"A2E_MAX_CONNECTIONS": "50", "A2E_MAX_CONNECTIONS_PER_PEER": "1000",
           "A2E_HANDSHAKE_TIMEOUT": "4", "A2E_AUTH_TOKEN": TOKEN}
    async with serving(CLI, "--port", "0", **env) as (url, host):
        idle: list[ClientConnection] = []
        try:
            for _ in range(50):
                with anyio.fail_after(WAIT):
                    idle.append(await connect(url))
            with pytest.raises(InvalidStatus) as refused:
                with anyio.fail_after(WAIT):
                    await connect(url)
            response = refused.value.response
            assert response.status_code == 503
            assert response.headers["Retry-After"] == "4"
            assert b"max_connections" in response.body
            # every idle connection is told, then closed, at the handshake deadline
            for ws in idle:
                with anyio.fail_after(WAIT):
                    told = json.loads(await ws.recv())
                assert (told["type"], told["code"]) == ("error", "handshake_required")
                assert await wait_closed(ws) == 1008
        finally:
            for ws in idle:
                await ws.close()
        # their slots are free again: the authorised client is served
        with anyio.fail_after(WAIT):
            async with connect(url) as ws:
                assert (await send(ws, hello(auth_token=TOKEN)))["ok"] is True
                assert (await send(ws, {"type": "ping", "id": "p"}))["type"] == "pong"
        refusals = log_lines(host, "connection refused")
        assert refusals and refusals[0]["ceiling"] == "max_connections"
        assert refusals[0]["limit"] == 50 and refusals[0]["level"] == "warning"


@pytest.mark.asyncio
async def test_a_peer_hogging_its_connection_share_does_not_lock_out_another_peer() -> None:
    env = {"A2E_MAX_CONNECTIONS_PER_PEER": "5", "A2E_AUTH_TOKEN": TOKEN}
    async with serving(CLI, "--port", "0", **env) as (url, host):
        hog: list[ClientConnection] = []
        try:
            for _ in range(5):
                with anyio.fail_after(WAIT):
                    hog.append(await connect(url))
            with pytest.raises(InvalidStatus) as refused:
                with anyio.fail_after(WAIT):
                    await connect(url)
            assert refused.value.response.status_code == 503
            assert b"127.0.0.1 has 5 connections open" in refused.value.response.body
            with anyio.fail_after(WAIT):
                async with connect(url, local_addr=("127.0.0.2", 0)) as ws:
                    assert (await send(ws, hello(auth_token=TOKEN)))["ok"] is True
            # and the hog itself gets a slot back as soon as one of its own closes
            await hog.pop().close()
            with anyio.fail_after(WAIT):
                while True:
                    try:
                        async with connect(url) as ws:
                            resp = await send(ws, hello(auth_token=TOKEN))
                        break
                    except InvalidStatus:  # the close is still settling on the host
                        await anyio.sleep(0.05)
            assert resp["ok"] is True
        finally:
            for ws in hog:
                await ws.close()
        refusal = log_lines(host, "connection refused")[0]
        assert (refusal["ceiling"], refusal["peer"]) == ("max_connections_per_peer", "127.0.0.1")


@pytest.mark.asyncio
async def test_token_guesses_over_websocket_take_at_least_one_delay_each() -> None:
    delay, guesses = 0.4, 4
    env = {"A2E_AUTH_TOKEN": TOKEN, "A2E_AUTH_FAILURE_DELAY": str(delay)}
    async with serving(CLI, "--port", "0", **env) as (url, _):
        answered: list[float] = []

        async def guess(n: int) -> None:
            async with connect(url) as ws:
                resp = await send(ws, hello(auth_token=f"guess{n}"))
                answered.append(anyio.current_time() - started)
                assert (resp["ok"], resp["reason"]) == (False, "auth_failed")
                assert await wait_closed(ws) == 1008

        started = anyio.current_time()
        async with anyio.create_task_group() as tg:  # all at once, on separate connections
            for n in range(guesses):
                tg.start_soon(guess, n)
        assert max(answered) >= guesses * delay, answered
        # one after another: the same pace
        started = anyio.current_time()
        for n in range(guesses):
            await guess(n)
        assert anyio.current_time() - started >= guesses * delay
        async with connect(url) as ws:  # meanwhile the right token is answered at once
            assert (await send(ws, hello(auth_token=TOKEN)))["ok"] is True


@pytest.mark.asyncio
async def test_ping_before_auth_is_refused_over_websocket_and_pong_after() -> None:
    async with serving(CLI, "--port", "0", A2E_AUTH_TOKEN=TOKEN) as (url, _):
        async with connect(url) as ws:
            early = await send(ws, {"type": "ping", "id": "early"})
            assert (early["type"], early["code"], early["req_id"]) == (
                "error", "handshake_required", "early")
            assert (await send(ws, hello(auth_token=TOKEN)))["ok"] is True
            assert (await send(ws, {"type": "ping", "id": "late"}))["req_id"] == "late"


@pytest.mark.asyncio
@pytest.mark.parametrize("code", [1000, 1001, 4000])
async def test_a_client_closing_normally_is_logged_with_its_close_code_not_as_dropped(
    code: int,
) -> None:
    async with serving(CLI, "--port", "0") as (url, host):
        async with connect(url) as ws:
            assert (await send(ws, hello()))["ok"] is True
            await ws.close(code, "done")
        with anyio.fail_after(WAIT):
            await host.wait_stderr('"connection closed"')
        closed = log_lines(host, "connection closed")
    assert len(closed) == 1
    assert (closed[0]["dropped"], closed[0]["close_code"], closed[0]["closed_by"]) == (
        False, code, "peer")


def test_an_upgrade_refused_after_it_was_counted_is_released_at_once() -> None:
    """A browser Origin (403) or a bad request is refused after process_request counted
    it; its handler never runs, so the count is released when the response goes out."""

    from websockets.http11 import Request, Response

    from a2e_host.transports.websocket import _Admission

    class Peer:  # a ServerConnection as the hooks use it: hashable, with an address
        def __init__(self, port: int) -> None:
            self.remote_address = ("127.0.0.1", port)

    admission = _Admission(HostConfig(max_connections=2), log=None)
    request = Request("/", Headers())
    refused, upgraded = Peer(1), Peer(2)
    assert admission(refused, request) is None  # type: ignore[arg-type]
    assert admission(upgraded, request) is None  # type: ignore[arg-type]
    assert len(admission.limiter) == 2
    admission.after_response(refused, request, Response(403, "Forbidden", Headers()))  # type: ignore[arg-type]
    admission.after_response(upgraded, request, Response(101, "Switching", Headers()))  # type: ignore[arg-type]
    assert len(admission.limiter) == 1  # only the open connection is counted
