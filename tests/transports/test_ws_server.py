"""``a2e-host serve`` as a real subprocess on 127.0.0.1 with real websockets clients
(PROTOCOL.md §1, §8). Cases needing chains use the fake chains plugin injected through
``python -m tests.support.fakes serve``."""

from __future__ import annotations

import json
import signal
from collections.abc import Iterator

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.support.fakes import FAKE
from tests.support.process import CLI, STARTUP, WAIT, open_host, signal_unless_reaped
from tests.support.requests import HANDSHAKE
from tests.support.ws import call, receive, shared_serving, wait_closed
from tests.support.ws import serving_argv as serving

FAKE_SERVE = [*FAKE, "serve", json.dumps({"port": 0, "max_parallel": 32})]
CLI_ARGS = ("--port", "0")


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    """One ``a2e-host serve --port 0`` for the cases that need no other setting: each
    talks to it on connections of its own."""
    with shared_serving([*CLI, "serve", *CLI_ARGS]) as served:
        yield served


@pytest.mark.asyncio
async def test_subprotocol_is_selected_when_offered_and_optional(url: str) -> None:
    async with connect(url, subprotocols=["a2e.v1"]) as ws:  # type: ignore[list-item]
        assert ws.subprotocol == "a2e.v1"
        assert (await call(ws, {"type": "ping", "id": "p"}))["type"] == "pong"
    async with connect(url) as ws:
        assert ws.subprotocol is None
        assert (await call(ws, {"type": "ping", "id": "q"}))["req_id"] == "q"


@pytest.mark.asyncio
async def test_binary_frame_is_invalid_message_and_the_connection_stays(url: str) -> None:
    async with connect(url) as ws:
        await ws.send(b'{"type": "ping", "id": "b"}')
        err = await receive(ws)
        assert (err["type"], err["code"]) == ("error", "invalid_message")
        assert (await call(ws, {"type": "ping", "id": "p"}))["req_id"] == "p"


@pytest.mark.asyncio
async def test_oversized_frame_closes_1009_bad_utf8_1007_and_others_carry_on() -> None:
    async with serving(CLI, *CLI_ARGS, A2E_MAX_MESSAGE_BYTES="100000") as (url, _):
        async with connect(url) as bystander:
            async with connect(url, max_size=None) as ws:
                await ws.send(json.dumps({"type": "ping", "pad": "x" * 200_000}))
                assert await wait_closed(ws) == 1009
            async with connect(url) as ws:
                await ws.send(b'{"type": "ping", "id": "\xff\xfe"}', text=True)
                assert await wait_closed(ws) == 1007
            assert (await call(bystander, {"type": "ping", "id": "still"}))["req_id"] == "still"


@pytest.mark.asyncio
async def test_foreign_origin_is_refused_with_403_and_allowed_origin_is_accepted() -> None:
    async with serving(CLI, *CLI_ARGS, "--allow-origin", "https://ok.example") as (url, _):
        with pytest.raises(InvalidStatus) as info:
            async with connect(url, origin="https://evil.example"):  # type: ignore[arg-type]
                pass
        assert info.value.response.status_code == 403
        async with connect(url, origin="https://ok.example") as ws:  # type: ignore[arg-type]
            assert (await call(ws, {"type": "ping", "id": "p"}))["type"] == "pong"


@pytest.mark.asyncio
async def test_wrong_token_is_auth_failed_then_closed_and_bearer_header_works() -> None:
    async with serving(CLI, *CLI_ARGS, "--auth-token", "s3cret") as (url, _):
        async with connect(url) as ws:
            resp = await call(ws, {**HANDSHAKE, "auth_token": "nope"})
            assert (resp["ok"], resp["reason"]) == (False, "auth_failed")
            assert await wait_closed(ws) == 1008
        headers = {"Authorization": "Bearer s3cret"}
        async with connect(url, additional_headers=headers) as ws:
            assert (await call(ws, {**HANDSHAKE, "agent_caps": ["video"]}))["reason"] == "no_caps"


@pytest.mark.asyncio
async def test_fifty_clients_times_twenty_pings_each_get_exactly_one_answer(url: str) -> None:
    answered: dict[int, list[str]] = {}

    async def client(n: int) -> None:
        async with connect(url) as ws:
            for i in range(20):
                await ws.send(json.dumps({"type": "ping", "id": f"{n}-{i}"}))
            answered[n] = [(await receive(ws))["req_id"] for _ in range(20)]

    async with anyio.create_task_group() as tg:
        for n in range(50):
            tg.start_soon(client, n)
    assert answered == {n: [f"{n}-{i}" for i in range(20)] for n in range(50)}


@pytest.mark.asyncio
async def test_fifty_clients_times_twenty_chains_each_get_exactly_one_response() -> None:
    async with serving(FAKE_SERVE) as (url, _):
        answered: dict[int, list[str]] = {}

        async def client(n: int) -> None:
            async with connect(url) as ws:
                assert (await call(ws, HANDSHAKE))["ok"]
                for i in range(20):
                    await ws.send(json.dumps({"type": "chain/req", "id": f"{n}-{i}",
                                              "initial_input": {"op": "echo"}}))
                got = [await receive(ws) for _ in range(20)]
                assert all(m["type"] == "chain/resp" and m["success"] for m in got)
                answered[n] = sorted(m["req_id"] for m in got)

        async with anyio.create_task_group() as tg:
            for n in range(50):
                tg.start_soon(client, n)
    assert answered == {n: sorted(f"{n}-{i}" for i in range(20)) for n in range(50)}


@pytest.mark.asyncio
async def test_a_blocking_tool_delays_neither_ping_nor_keepalive() -> None:
    async with serving(FAKE_SERVE) as (url, host), connect(url) as ws:
        assert (await call(ws, HANDSHAKE))["ok"]
        await ws.send(json.dumps({"type": "chain/req", "id": "slow",
                                  "initial_input": {"op": "block", "seconds": 30}}))
        with anyio.fail_after(WAIT):
            await host.wait_stderr("fake chain started slow")
        assert (await call(ws, {"type": "ping", "id": "p"}))["req_id"] == "p"
        with anyio.fail_after(WAIT):
            await (await ws.ping())  # the server's protocol layer answers at once
        await ws.send(json.dumps({"type": "shutdown", "timeout": 0}))
        resp = await receive(ws)
        assert (resp["req_id"], resp["error"]["code"]) == ("slow", "cancelled")
        assert await wait_closed(ws) == 1000


@pytest.mark.asyncio
async def test_a_dropped_client_has_its_work_cancelled_and_the_host_keeps_serving() -> None:
    async with serving(FAKE_SERVE) as (url, host):
        async with connect(url) as ws:
            assert (await call(ws, HANDSHAKE))["ok"]
            await ws.send(json.dumps({"type": "chain/req", "id": "w",
                                      "initial_input": {"op": "block", "seconds": 60}}))
            with anyio.fail_after(WAIT):
                await host.wait_stderr("fake chain started w")
        with anyio.fail_after(WAIT):
            await host.wait_stderr("peer gone; cancelling")
        async with connect(url) as ws:
            assert (await call(ws, HANDSHAKE))["ok"]
            resp = await call(ws, {"type": "chain/req", "id": "e", "initial_input": {"op": "echo"}})
            assert resp["success"] is True


@pytest.mark.asyncio
async def test_shutdown_with_work_in_flight_sends_the_response_then_closes() -> None:
    async with serving(FAKE_SERVE) as (url, _), connect(url) as ws:
        assert (await call(ws, HANDSHAKE))["ok"]
        await ws.send(json.dumps({"type": "chain/req", "id": "w",
                                  "initial_input": {"op": "block", "seconds": 0.2}}))
        await ws.send(json.dumps({"type": "shutdown", "timeout": 30}))
        resp = await receive(ws)
        assert (resp["type"], resp["req_id"], resp["success"]) == ("chain/resp", "w", True)
        assert await wait_closed(ws) == 1000


@pytest.mark.asyncio
async def test_sigterm_lets_work_finish_then_closes_with_going_away() -> None:
    async with anyio.create_task_group() as tg:
        host = await open_host(FAKE_SERVE)
        tg.start_soon(host.collect_stderr)
        with anyio.fail_after(STARTUP):
            found = await host.wait_stderr(r"a2e-host listening on (ws://127\.0\.0\.1:\d+)")
        async with connect(found.group(1)) as ws:
            assert (await call(ws, HANDSHAKE))["ok"]
            await ws.send(json.dumps({"type": "chain/req", "id": "w",
                                      "initial_input": {"op": "block", "seconds": 0.3}}))
            with anyio.fail_after(WAIT):
                await host.wait_stderr("fake chain started w")
            host.process.send_signal(signal.SIGTERM)
            resp = await receive(ws)
            assert (resp["req_id"], resp["success"]) == ("w", True)
            assert await wait_closed(ws) == 1001
        assert await host.wait() == 0


@pytest.mark.asyncio
async def test_sigterm_repeated_until_the_host_exits_still_ends_with_status_0() -> None:
    """A supervisor repeating SIGTERM while the host closes (store, children) must not
    kill it with -15: after serving stops, late SIGTERMs are ignored. (Sent with
    ``os.kill``: ``process.send_signal`` polls the child and may reap it first, and the
    exit status is then lost.)"""
    async with anyio.create_task_group() as tg:
        host = await open_host([*CLI, "serve", *CLI_ARGS])
        tg.start_soon(host.collect_stderr)
        with anyio.fail_after(STARTUP):
            await host.wait_stderr(r"a2e-host listening on ")
        sent = 0
        with anyio.fail_after(WAIT):
            while host.process.returncode is None:
                signal_unless_reaped(host.process, signal.SIGTERM)
                sent += 1
                with anyio.move_on_after(0.002):
                    await host.process.wait()
        tg.cancel_scope.cancel()
    assert sent >= 2
    assert host.process.returncode == 0, host.stderr[-2000:]
    assert b"Traceback" not in host.stderr
