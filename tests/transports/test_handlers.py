"""Transports serve a connection handler and a stop signal; a connection gets a Router,
not the host; gates belong to whichever plugin declares them (issue 14, item 2)."""

from __future__ import annotations

import json
import os
from typing import Any, ClassVar

import anyio
import pytest
from websockets.asyncio.client import connect

from a2e_host.admission import AuthThrottle
from a2e_host.codec import MessageCodec
from a2e_host.config import HostConfig
from a2e_host.errors import error_message_of
from a2e_host.logs import get_logger
from a2e_host.messages import CORE_MESSAGE_TYPES, HandshakeRequest, HandshakeResponse, Message
from a2e_host.plugin import Plugin, PluginContext
from a2e_host.runtime.connection import HostConnection
from a2e_host.runtime.host import GATES_FEATURE, Host
from a2e_host.runtime.memory import open_memory_client
from a2e_host.runtime.router import Router
from a2e_host.runtime.runs import RunRegistry
from a2e_host.transports import Transport
from a2e_host.transports.memory import open_memory_connection
from a2e_host.transports.stdio import serve_stdio
from a2e_host.transports.websocket import serve_websocket

WAIT = 10  # seconds: the bound on every wait


async def echo_twice(transport: Transport) -> None:
    """A handler that knows nothing of A2E: sends each frame back twice, until EOF."""
    try:
        while True:
            frame = await transport.receive()
            data = frame.encode() if isinstance(frame, str) else frame
            assert isinstance(data, bytes)
            await transport.send_frames([data, data])
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        pass
    finally:
        await transport.aclose()


# ── a transport serves any handler ──────────────────────────────────────────────


@pytest.mark.asyncio
async def test_a_websocket_server_serves_any_handler_and_stops_on_its_signal() -> None:
    stop = anyio.Event()
    config = HostConfig(host="127.0.0.1", port=0)
    with anyio.fail_after(WAIT):
        async with anyio.create_task_group() as tg:
            address = await tg.start(
                lambda task_status: serve_websocket(
                    echo_twice, config, stop=stop, task_status=task_status
                )
            )
            async with connect(f"ws://127.0.0.1:{address[1]}") as ws:
                await ws.send('{"any": "text"}')
                assert [await ws.recv(), await ws.recv()] == ['{"any": "text"}'] * 2
                stop.set()  # the server stops accepting; this handler runs on
                await ws.send("again")
                assert await ws.recv() == "again"
            # the client left, its handler returned: serve_websocket returns by itself
        with pytest.raises(OSError):
            async with connect(f"ws://127.0.0.1:{address[1]}", open_timeout=2):
                pass


@pytest.mark.asyncio
async def test_the_memory_transport_carries_bytes_to_any_handler_and_back() -> None:
    with anyio.fail_after(WAIT):
        async with open_memory_connection(echo_twice) as client:
            client.send(b"\x00 not json at all")
            assert [await client.receive(), await client.receive()] == [
                b"\x00 not json at all"
            ] * 2
            client.send_eof()
            with pytest.raises(anyio.EndOfStream):
                await client.receive()


@pytest.mark.asyncio
async def test_the_memory_transport_holds_a_batch_at_its_buffer_and_keeps_the_order() -> None:
    frames = [b"%d" % n for n in range(7)]
    sent = anyio.Event()

    async def burst(transport: Transport) -> None:
        await transport.send_frames(frames)  # waits while 3 are buffered
        sent.set()
        await transport.aclose()

    got: list[bytes] = []
    with anyio.fail_after(WAIT):
        async with open_memory_connection(burst, buffer_frames=3) as client:
            await anyio.wait_all_tasks_blocked()
            assert not sent.is_set()  # 3 of 7 buffered: the host's writer waits
            first = await client.receive_some()
            assert first == frames[:3]
            got += first
            got.append(await client.receive())
            with pytest.raises(anyio.EndOfStream):  # the handler closes after its burst
                while True:
                    got += await client.receive_some()
    assert sent.is_set() and got == frames


@pytest.mark.asyncio
async def test_stdio_serves_its_one_connection_with_any_handler() -> None:
    in_read, in_write = os.pipe()
    out_read, out_write = os.pipe()
    try:
        os.write(in_write, b'{"n": 1}\n')
        os.close(in_write)  # EOF after one line
        with anyio.fail_after(WAIT):
            await serve_stdio(echo_twice, max_line_bytes=1024, in_fd=in_read, out_fd=out_write)
        os.close(out_write)
        out = b""
        while chunk := os.read(out_read, 4096):
            out += chunk
    finally:
        for fd in (in_read, out_read):
            os.close(fd)
    assert out == b'{"n": 1}\n{"n": 1}\n'


# ── a connection needs a router, not a host ─────────────────────────────────────


class Note(Message, tag="note/put", kw_only=True):
    TYPE: ClassVar[str] = "note/put"
    text: str = ""


class NoteSaved(Message, tag="note/saved", kw_only=True):
    TYPE: ClassVar[str] = "note/saved"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    text: str = ""


class Notes(Plugin):
    """A capability with gates that is not chains: ``notes``, gates ``shared`` (always)
    and ``bulk`` (only with ``allow_proc``, to show the gates follow the config)."""

    capability: ClassVar[str] = "notes"
    namespace: ClassVar[str] = "note/*"
    message_types: ClassVar[tuple[type[Message], ...]] = (Note, NoteSaved)

    def gates(self) -> tuple[str, ...]:
        return ("shared", "bulk") if self.config.allow_proc else ("shared",)

    async def handle(self, message: Message, ctx: PluginContext) -> None:
        assert isinstance(message, Note)
        ctx.outbox.send_nowait(NoteSaved(req_id=message.id, text=message.text.upper()))


@pytest.mark.asyncio
async def test_a_connection_is_served_with_a_router_built_by_hand_and_no_host() -> None:
    config = HostConfig()
    plugin = Notes(config)
    codec = MessageCodec(CORE_MESSAGE_TYPES + Notes.message_types)
    runs = RunRegistry(get_logger())
    router = Router(
        config=config, codec=codec, plugins=(plugin,), served={"notes": plugin.metadata},
        gates={}, auth_throttle=AuthThrottle(0), runs=runs, log=get_logger(),
        error_message=error_message_of,
    )

    async def handler(transport: Transport) -> None:
        await HostConnection(router, transport).run()

    hello = b'{"type": "handshake/req", "id": "h", "agent_caps": ["notes"]}'
    with anyio.fail_after(WAIT):
        async with runs.open(), open_memory_connection(handler) as client:
            client.send(hello)
            resp = codec.decode(await client.receive())
            client.send(b'{"type": "note/put", "id": "n1", "text": "hi"}')
            saved = codec.decode(await client.receive())
    assert isinstance(resp, HandshakeResponse) and resp.ok
    assert isinstance(saved, NoteSaved) and (saved.req_id, saved.text) == ("n1", "HI")


@pytest.mark.asyncio
@pytest.mark.parametrize(("allow_proc", "gates"), [((), ["shared"]),
                                                    (("echo",), ["bulk", "shared"])])
async def test_any_plugin_declares_its_gates_and_the_host_grants_and_publishes_them(
    allow_proc: tuple[str, ...], gates: list[str]
) -> None:
    host = Host(HostConfig(allow_proc=allow_proc), plugins=[Notes])
    assert dict(host.gates()) == {g: "notes" for g in gates}
    async with open_memory_client(host) as client:
        client.send(HandshakeRequest(agent_caps=["notes", "shared", "bulk", "chains"]))
        with anyio.fail_after(WAIT):
            resp = await client.receive()
    assert isinstance(resp, HandshakeResponse) and resp.ok
    assert [c.capability for c in resp.accepted_caps] == ["notes"]
    meta: dict[str, Any] = resp.accepted_caps[0].metadata
    assert meta["gates"] == gates
    assert meta["features"] == [GATES_FEATURE]
    assert json.loads(json.dumps(meta))["namespace"] == "note/*"


def test_a_plugin_without_gates_gets_no_gates_entry_in_its_metadata() -> None:
    class Plain(Plugin):
        capability: ClassVar[str] = "plain"
        namespace: ClassVar[str] = "plain/*"

    host = Host(HostConfig(), plugins=[Plain])
    assert dict(host.gates()) == {}
    metadata = host.served_capabilities()["plain"]
    assert metadata is not None
    assert "gates" not in metadata(object())  # type: ignore[arg-type]


def test_the_chains_plugin_owns_skill_always_and_proc_only_with_an_allowed_executable() -> None:
    from a2e_chains import ChainPlugin

    assert ChainPlugin(HostConfig(tools=("conformance",))).gates() == ("skill",)
    allowed = HostConfig(tools=("conformance",), allow_proc=("echo",))
    assert ChainPlugin(allowed).gates() == ("skill", "proc")
    assert dict(Host(allowed, plugins=[ChainPlugin]).gates()) == {"proc": "chains",
                                                                  "skill": "chains"}
