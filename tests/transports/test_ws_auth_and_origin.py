"""Who may talk to the real ``a2e-host serve`` (PROTOCOL.md §1, §2): a missing or wrong
token is ``auth_failed`` and a 1008 close with no work taken, whether sent in the
handshake or as a header; a browser origin is refused with 403 unless allowed."""

from __future__ import annotations

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.support.requests import HANDSHAKE
from tests.support.ws import (
    chain_frame,
    echo_node,
    hello,
    receive,
    reply,
    send,
    serving,
    wait_closed,
)


@pytest.mark.asyncio
async def test_missing_or_wrong_token_is_auth_failed_then_closed_and_no_work_is_taken() -> None:
    # failed auths are throttled (auth_failure_delay); this test is about the answer
    async with serving("--auth-token", "T0k", env={"A2E_AUTH_FAILURE_DELAY": "0.05"}) as (url, _):
        for extra in ({}, {"auth_token": ""}, {"auth_token": "T0k "}, {"auth_token": "t0k"}):
            async with connect(url) as ws:
                await send(ws, {**HANDSHAKE, **extra})
                await send(ws, chain_frame("after", echo_node(1)))
                resp = await receive(ws)
                assert (resp["type"], resp["ok"], resp["reason"]) == (
                    "handshake/resp", False, "auth_failed"
                ), (extra, resp)
                assert resp["session_id"] == "", f"no session for a refused client: {resp}"
                assert await wait_closed(ws) == 1008, extra
        for header in ("Bearer wrong", "Basic VDBrOg==", "T0k"):
            async with connect(url, additional_headers={"Authorization": header}) as ws:
                await send(ws, HANDSHAKE)
                resp = await receive(ws)
                assert (resp["ok"], resp["reason"]) == (False, "auth_failed"), (header, resp)
        async with connect(url, additional_headers={"Authorization": "Bearer T0k"}) as ws:
            await hello(ws)
            await send(ws, chain_frame("ok", echo_node(2)))
            assert (await reply(ws))["final_output"] == {"v": 2}


@pytest.mark.asyncio
async def test_any_browser_origin_is_refused_403_when_none_is_allowed() -> None:
    async with serving() as (url, _):
        for origin in ("http://127.0.0.1", "http://localhost:8765", "null", "file://"):
            with pytest.raises(InvalidStatus) as info:
                async with connect(url, origin=origin):  # type: ignore[arg-type]
                    pass
            assert info.value.response.status_code == 403, origin
        async with connect(url) as ws:
            await hello(ws)
