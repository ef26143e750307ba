"""The host's dispatch and connection life cycle, through the in-memory transport (the same
connection path stdio and WebSocket use). PROTOCOL.md §2."""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import pytest

from a2e_host.chains.messages import ChainRequest, ChainResponse
from a2e_host.config import HostConfig
from a2e_host.limits import Limits
from a2e_host.messages import (
    ErrorMessage,
    HandshakeRequest,
    HandshakeResponse,
    Message,
    Ping,
    Pong,
    Shutdown,
)
from a2e_host.plugin import Plugin
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import MessageClient, open_memory_client
from tests.support.fakes import FakeChainPlugin

WAIT = 10  # seconds: the bound on every wait


def make_host(**config: Any) -> tuple[Host, FakeChainPlugin]:
    cfg = HostConfig(**config)
    plugin = FakeChainPlugin(cfg)
    return Host(cfg, plugins=[plugin]), plugin


async def receive(client: MessageClient) -> Message:
    with anyio.fail_after(WAIT):
        return await client.receive()


async def handshake(client: MessageClient, **fields: Any) -> HandshakeResponse:
    fields.setdefault("agent_caps", ["chains"])
    client.send(HandshakeRequest(**fields))
    resp = await receive(client)
    assert isinstance(resp, HandshakeResponse)
    return resp


def chain(op: str, **args: Any) -> ChainRequest:
    return ChainRequest(nodes=[], initial_input={"op": op, **args})


@pytest.mark.asyncio
async def test_bad_messages_get_one_error_each_in_order_and_the_connection_goes_on() -> None:
    host, _ = make_host()
    async with open_memory_client(host) as client:
        client.send(b"{not json")
        client.send(b"[1, 2]")
        client.send(b'{"type": "chain/frobnicate", "id": "u1"}')
        client.send(b'{"type": "ping", "id": "v1", "version": "2.0"}')
        client.send(ChainRequest(id="early", nodes=[]))
        client.send(Ping(id="p1"))
        got = [await receive(client) for _ in range(6)]
    codes = [(m.code, m.req_id) for m in got[:5] if isinstance(m, ErrorMessage)]
    assert codes == [
        ("parse_error", ""),
        ("invalid_message", ""),
        ("unknown_type", "u1"),
        ("version_mismatch", "v1"),
        ("handshake_required", "early"),
    ]
    assert isinstance(got[5], Pong) and got[5].req_id == "p1"


@pytest.mark.asyncio
async def test_handshake_grants_asked_and_served_caps_with_plugin_metadata() -> None:
    host, _ = make_host(allow_proc=("echo",), limits=Limits(max_parallel=8))
    async with open_memory_client(host) as client:
        resp = await handshake(
            client, agent_caps=["chains", "proc", "chains", "video"], limits={"max_parallel": 3}
        )
    assert resp.ok and resp.reason == ""
    assert [c.capability for c in resp.accepted_caps] == ["chains"]
    assert resp.max_parallel == 3
    meta = resp.accepted_caps[0].metadata
    assert meta["namespace"] == "chain/*"
    assert meta["features"] == ["fake", "handshake/gates"]
    assert meta["gates"] == ["proc"]
    assert meta["limits"]["max_parallel"] == 3
    assert len(resp.session_id) == 32


@pytest.mark.asyncio
async def test_gates_are_published_in_chains_metadata_and_proc_needs_an_allowed_executable(
) -> None:
    host, _ = make_host()
    async with open_memory_client(host) as client:
        resp = await handshake(client, agent_caps=["chains", "proc", "skill", "tools"])
    assert [c.capability for c in resp.accepted_caps] == ["chains"]
    assert resp.accepted_caps[0].metadata["gates"] == ["skill"]


@pytest.mark.asyncio
@pytest.mark.parametrize("asked", [["tools"], ["skill"], ["proc"], ["tools", "proc", "skill"]])
async def test_node_kind_names_alone_are_no_caps_since_nothing_serves_them(
    asked: list[str],
) -> None:
    host, _ = make_host(allow_proc=("echo",))
    async with open_memory_client(host) as client:
        resp = await handshake(client, agent_caps=asked)
    assert (resp.ok, resp.reason, resp.accepted_caps) == (False, "no_caps", [])


@pytest.mark.asyncio
async def test_bad_session_limits_are_a_schema_violation_naming_the_ceiling() -> None:
    host, _ = make_host()
    async with open_memory_client(host) as client:
        client.send(HandshakeRequest(id="h1", agent_caps=["chains"], limits={"max_nodez": 5}))
        err = await receive(client)
        assert isinstance(err, ErrorMessage)
        assert (err.code, err.req_id, err.detail["path"]) == (
            "schema_violation",
            "h1",
            "$.limits.max_nodez",
        )
        client.send(chain("echo", id="after"))
        refused = await receive(client)
    assert isinstance(refused, ErrorMessage) and refused.code == "handshake_required"


@pytest.mark.asyncio
async def test_second_handshake_is_refused_and_the_first_session_stays() -> None:
    host, _ = make_host()
    async with open_memory_client(host) as client:
        first = await handshake(client)
        client.send(HandshakeRequest(id="again", agent_caps=["chains"]))
        err = await receive(client)
        client.send(
            ChainRequest(id="c1", session_id=first.session_id, initial_input={"op": "echo"})
        )
        resp = await receive(client)
    assert isinstance(err, ErrorMessage) and (err.code, err.req_id) == ("invalid_message", "again")
    assert isinstance(resp, ChainResponse) and resp.req_id == "c1" and resp.success


@pytest.mark.asyncio
async def test_no_caps_refusal_allows_a_new_handshake() -> None:
    host, _ = make_host()
    async with open_memory_client(host) as client:
        refused = await handshake(client, agent_caps=["video"])
        accepted = await handshake(client, agent_caps=["chains"])
    assert (refused.ok, refused.reason, refused.session_id) == (False, "no_caps", "")
    assert accepted.ok


@pytest.mark.asyncio
async def test_wrong_session_id_is_unknown_session_and_empty_means_this_one() -> None:
    host, _ = make_host()
    async with open_memory_client(host) as client:
        await handshake(client)
        client.send(ChainRequest(id="x", session_id="not-mine", initial_input={"op": "echo"}))
        err = await receive(client)
        client.send(ChainRequest(id="y", session_id="", initial_input={"op": "echo"}))
        ok = await receive(client)
    assert isinstance(err, ErrorMessage) and (err.code, err.req_id) == ("unknown_session", "x")
    assert isinstance(ok, ChainResponse) and ok.req_id == "y"


class VideoPlugin(Plugin):
    """Serves another capability, so a session can be granted something but chains."""

    capability: ClassVar[str] = "video"
    namespace: ClassVar[str] = "video/*"


@pytest.mark.asyncio
async def test_work_on_a_session_without_the_capability_is_capability_missing() -> None:
    cfg = HostConfig()
    host = Host(cfg, plugins=[FakeChainPlugin(cfg), VideoPlugin(cfg)])
    async with open_memory_client(host) as client:
        resp = await handshake(client, agent_caps=["video"])
        assert [c.capability for c in resp.accepted_caps] == ["video"]
        client.send(chain("echo", id="c"))
        err = await receive(client)
    assert isinstance(err, ErrorMessage)
    assert (err.code, err.capability_name) == ("capability_missing", "chains")


@pytest.mark.asyncio
async def test_plugin_protocol_errors_keep_their_code_and_bugs_become_runtime_error() -> None:
    host, _ = make_host()
    async with open_memory_client(host) as client:
        await handshake(client)
        client.send(ChainRequest(id="r", initial_input={"op": "refuse"}))
        busy = await receive(client)
        client.send(ChainRequest(id="k", initial_input={"op": "crash"}))
        crash = await receive(client)
    assert isinstance(busy, ErrorMessage)
    assert (busy.code, busy.req_id, busy.retryable, busy.capability_name) == (
        "busy",
        "r",
        True,
        "chains",
    )
    assert isinstance(crash, ErrorMessage)
    assert (crash.code, crash.req_id) == ("runtime_error", "k")
    assert "secret" not in crash.message and crash.detail == {}


@pytest.mark.asyncio
async def test_host_types_sent_by_an_agent_are_invalid_messages() -> None:
    host, _ = make_host()
    async with open_memory_client(host) as client:
        client.send(Pong(id="po"))
        err = await receive(client)
    assert isinstance(err, ErrorMessage) and (err.code, err.req_id) == ("invalid_message", "po")


@pytest.mark.asyncio
async def test_chains_run_concurrently_and_max_parallel_is_busy() -> None:
    host, plugin = make_host(limits=Limits(max_parallel=2))
    async with open_memory_client(host) as client:
        await handshake(client)
        client.send(ChainRequest(id="a", initial_input={"op": "hold"}))
        client.send(ChainRequest(id="b", initial_input={"op": "hold"}))
        with anyio.fail_after(WAIT):
            await plugin.started_event("a").wait()
            await plugin.started_event("b").wait()
        client.send(ChainRequest(id="c", initial_input={"op": "echo"}))
        busy = await receive(client)
        client.send(Ping(id="p"))
        pong = await receive(client)
        plugin.release("b")
        b_done = await receive(client)
        plugin.release("a")
        a_done = await receive(client)
    assert isinstance(busy, ErrorMessage) and (busy.code, busy.req_id) == ("busy", "c")
    assert isinstance(pong, Pong)
    assert isinstance(b_done, ChainResponse) and b_done.req_id == "b"
    assert isinstance(a_done, ChainResponse) and a_done.req_id == "a"


@pytest.mark.asyncio
async def test_client_gone_cancels_its_work_and_the_host_keeps_serving() -> None:
    host, plugin = make_host()
    async with open_memory_client(host) as client:
        hs = await handshake(client)
        client.send(ChainRequest(id="long", initial_input={"op": "hold"}))
        with anyio.fail_after(WAIT):
            await plugin.started_event("long").wait()
    # leaving the block closed the client and waited for the connection to end
    assert plugin.cancelled == ["long"]
    assert plugin.closed_sessions == [hs.session_id]
    assert host.connections == set()
    async with open_memory_client(host) as other:
        await handshake(other)
        other.send(ChainRequest(id="next", initial_input={"op": "echo"}))
        resp = await receive(other)
    assert isinstance(resp, ChainResponse) and resp.success


@pytest.mark.asyncio
async def test_shutdown_lets_work_finish_sends_its_response_then_closes() -> None:
    host, plugin = make_host()
    async with open_memory_client(host) as client:
        await handshake(client)
        client.send(ChainRequest(id="w", initial_input={"op": "hold"}))
        with anyio.fail_after(WAIT):
            await plugin.started_event("w").wait()
        client.send(Shutdown(id="s", timeout=30))
        client.send(ChainRequest(id="late", initial_input={"op": "echo"}))
        late = await receive(client)
        plugin.release("w")
        resp = await receive(client)
        with anyio.fail_after(WAIT), pytest.raises(anyio.EndOfStream):
            await client.receive()
        assert client.close_code == 1000
    assert isinstance(late, ErrorMessage) and late.code == "busy"
    assert isinstance(resp, ChainResponse) and (resp.req_id, resp.success) == ("w", True)
    assert plugin.cancelled == []


@pytest.mark.asyncio
async def test_shutdown_cancels_work_past_its_timeout_and_still_sends_the_response() -> None:
    host, plugin = make_host()
    async with open_memory_client(host) as client:
        await handshake(client)
        client.send(ChainRequest(id="w", initial_input={"op": "hold"}))
        with anyio.fail_after(WAIT):
            await plugin.started_event("w").wait()
        client.send(Shutdown(timeout=0))
        resp = await receive(client)
        with anyio.fail_after(WAIT), pytest.raises(anyio.EndOfStream):
            await client.receive()
    assert isinstance(resp, ChainResponse)
    assert (resp.req_id, resp.success, resp.error.code) == ("w", False, "cancelled")
    assert plugin.cancelled == ["w"]


@pytest.mark.asyncio
async def test_end_of_input_lets_work_finish_and_flushes_before_closing() -> None:
    host, plugin = make_host()
    async with open_memory_client(host) as client:
        await handshake(client)
        client.send(ChainRequest(id="w", initial_input={"op": "hold"}))
        client.send_eof()
        with anyio.fail_after(WAIT):
            await plugin.started_event("w").wait()
        plugin.release("w")
        resp = await receive(client)
        with anyio.fail_after(WAIT), pytest.raises(anyio.EndOfStream):
            await client.receive()
    assert isinstance(resp, ChainResponse) and (resp.req_id, resp.success) == ("w", True)


@pytest.mark.asyncio
async def test_host_shutdown_closes_connections_with_going_away() -> None:
    host, plugin = make_host(shutdown_grace=30)
    async with open_memory_client(host) as client:
        await handshake(client)
        client.send(ChainRequest(id="w", initial_input={"op": "hold"}))
        with anyio.fail_after(WAIT):
            await plugin.started_event("w").wait()
        host.shutdown(30)
        host.shutdown(0)  # a second signal hurries it
        resp = await receive(client)
        with anyio.fail_after(WAIT), pytest.raises(anyio.EndOfStream):
            await client.receive()
        assert client.close_code == 1001
    assert isinstance(resp, ChainResponse) and resp.error.code == "cancelled"


@pytest.mark.asyncio
async def test_wrong_token_is_auth_failed_then_closed_and_bearer_token_is_accepted() -> None:
    host, _ = make_host(auth_token="s3cret")
    async with open_memory_client(host) as client:
        resp = await handshake(client, auth_token="wrong")
        with anyio.fail_after(WAIT), pytest.raises(anyio.EndOfStream):
            await client.receive()
        assert client.close_code == 1008
    assert (resp.ok, resp.reason, resp.accepted_caps) == (False, "auth_failed", [])
    async with open_memory_client(host, bearer_token="s3cret") as client:
        assert (await handshake(client)).ok
    async with open_memory_client(host) as client:
        assert (await handshake(client, auth_token="s3cret")).ok


@pytest.mark.asyncio
async def test_message_over_the_session_ceiling_is_message_too_large() -> None:
    host, _ = make_host()
    async with open_memory_client(host) as client:
        await handshake(client, limits={"max_message_bytes": 1000})
        client.send(ChainRequest(id="big", initial_input={"op": "echo", "pad": "x" * 2000}))
        err = await receive(client)
        client.send(Ping(id="p"))
        pong = await receive(client)
    assert isinstance(err, ErrorMessage) and err.code == "message_too_large"
    assert err.detail["limit"] == 1000 and err.detail["size"] > 2000
    assert isinstance(pong, Pong) and pong.req_id == "p"


@pytest.mark.asyncio
async def test_a_slow_reader_holds_producers_at_the_outbox_high_water_mark() -> None:
    host, plugin = make_host(outbox_high_water=4, limits=Limits(max_parallel=100))
    async with open_memory_client(host, buffer_frames=1) as client:
        await handshake(client)
        for i in range(20):
            client.send(ChainRequest(id=f"e{i}", initial_input={"op": "echo"}))
        await anyio.wait_all_tasks_blocked()  # nobody reads: every producer is stuck
        conn = next(iter(host.connections))
        assert len(plugin.started) == 20
        assert len(conn.outbox) == 5  # high water + the one frame let through
        assert len(plugin.running[conn.session.session_id]) == 20 - 5 - 2
        ids = [(await receive(client)).req_id for _ in range(20)]  # type: ignore[attr-defined]
        assert len(conn.outbox) == 0
    assert sorted(ids) == sorted(f"e{i}" for i in range(20))
