"""A process's output on the wire is bounded (PROTOCOL.md §10): each read event carries at
most 64 KiB, a stream past its cap is dropped and counted (with a ``dropped`` event
saying so), and a reader that does not read stops the process instead of growing the
host's memory."""

from __future__ import annotations

import shutil
from typing import Any

import anyio
import msgspec
import pytest
from a2e_proc import MAX_PENDING_WRITES, ProcPlugin
from a2e_proc.process import READ_CHUNK, LiveProcess

from a2e_host.chains.proc_messages import (
    ProcKillRequest,
    ProcKillResponse,
    ProcReadEvent,
    ProcSpawnRequest,
    ProcSpawnResponse,
    ProcWriteRequest,
    ProcWriteResponse,
)
from a2e_host.chains.proc_policy import ProcPolicy
from a2e_host.config import HostConfig
from a2e_host.messages import ErrorMessage, HandshakeRequest, HandshakeResponse, Message
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import MessageClient, open_memory_client
from tests.support.process import WAIT
from tests.support.sdk import assert_sdk_accepts

pytestmark = pytest.mark.timeout(60)


def host_with(cap: int, **config: Any) -> Host:
    """A host serving proc (``sh`` allowed) whose streams are capped at ``cap`` bytes."""
    host_config = HostConfig(allow_proc=("sh",), **config)
    sh = shutil.which("sh")
    assert sh is not None
    policy = ProcPolicy({"sh": sh}, max_stdout_bytes=cap, max_stderr_bytes=cap)
    return Host(host_config, plugins=[ProcPlugin(host_config, policy=policy)])


async def receive(client: MessageClient) -> Message:
    with anyio.fail_after(WAIT):
        return await client.receive()


async def spawn(client: MessageClient, script: str) -> ProcSpawnResponse:
    client.send(HandshakeRequest(id="h", agent_caps=["proc"]))
    assert isinstance(await receive(client), HandshakeResponse)
    client.send(ProcSpawnRequest(id="s", cmd=["sh", "-c", script]))
    resp = await receive(client)
    assert isinstance(resp, ProcSpawnResponse) and resp.ok, resp
    return resp


async def events_to_exit(client: MessageClient) -> list[ProcReadEvent]:
    events: list[ProcReadEvent] = []
    while not events or events[-1].kind != "exit":
        event = await receive(client)
        assert isinstance(event, ProcReadEvent), event
        events.append(event)
    return events


@pytest.mark.asyncio
async def test_output_past_the_cap_is_dropped_counted_and_said_once() -> None:
    host = host_with(200_000)
    async with host.running(), open_memory_client(host) as client:
        await spawn(client, "head -c 1000000 /dev/zero | tr '\\0' x; echo tail >&2")
        events = await events_to_exit(client)
    outputs = [e for e in events if e.kind == "output" and e.stream_type == "stdout"]
    assert "".join(e.data["text"] for e in outputs) == "x" * 200_000
    assert max(len(e.data["text"]) for e in outputs) <= READ_CHUNK
    assert len(outputs) >= 200_000 // READ_CHUNK + 1
    dropped = [e for e in events if e.kind == "dropped"]
    assert [(e.stream_type, e.data["limit"]) for e in dropped] == [("stdout", 200_000)]
    end = events[-1]
    assert (end.data["state"], end.data["exit_code"], end.data["dropped"]) == (
        "stopped", 0, {"stdout": 800_000, "stderr": 0})
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    for event in (dropped[0], end, outputs[0]):
        assert_sdk_accepts(_wire(event))


@pytest.mark.asyncio
async def test_a_reader_that_does_not_read_stops_the_process_not_the_host() -> None:
    total = 8 * 1024 * 1024
    host = host_with(16 * 1024 * 1024, outbox_high_water=4,
                     outbox_high_water_bytes=256 * 1024)
    async with host.running(), open_memory_client(host, buffer_frames=4) as client:
        await spawn(client, f"head -c {total} /dev/zero | tr '\\0' y")
        [plugin] = host.plugins
        assert isinstance(plugin, ProcPlugin)
        [procs] = plugin._sessions.values()
        process = procs.procs["p1"]
        assert isinstance(process, LiveProcess)
        # nobody reads: the pump stops at the outbox's high-water mark, so what was sent
        # stays bounded however long we wait, and the process is blocked, not finished
        with anyio.move_on_after(1.0):
            await process.ended.wait()
        bound = 256 * 1024 + 8 * READ_CHUNK  # the outbox's bytes mark, the frames buffered
        assert process.running and process.sent["stdout"] <= bound, process.sent
        events = await events_to_exit(client)
    text = "".join(e.data["text"] for e in events if e.kind == "output")
    assert (len(text), set(text)) == (total, {"y"})
    assert (events[-1].data["state"], events[-1].data["dropped"]) == (
        "stopped", {"stdout": 0, "stderr": 0})


def _wire(message: Message) -> dict[str, Any]:
    result: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(message))
    return result


@pytest.mark.asyncio
async def test_writes_waiting_for_a_full_stdin_are_bounded_and_answered_when_it_ends() -> None:
    host = host_with(1024)
    chunk = "z" * (1024 * 1024)  # more than a pipe holds: a process not reading blocks it
    async with host.running(), open_memory_client(host) as client:
        await spawn(client, "exec sleep 30")
        for n in range(MAX_PENDING_WRITES + 1):
            client.send(ProcWriteRequest(id=f"w{n}", proc_id="p1", data=chunk))
        busy = await receive(client)
        assert isinstance(busy, ErrorMessage)
        assert (busy.code, busy.req_id, busy.retryable) == (
            "busy", f"w{MAX_PENDING_WRITES}", True)
        client.send(ProcKillRequest(id="k", proc_id="p1"))
        replies: dict[str, Message] = {}
        while "k" not in replies or len(replies) < MAX_PENDING_WRITES + 1:
            message = await receive(client)
            if not isinstance(message, ProcReadEvent):
                replies[getattr(message, "req_id", "")] = message
    written = [replies[f"w{n}"] for n in range(MAX_PENDING_WRITES)]
    assert all(isinstance(w, ProcWriteResponse) and not w.ok and w.written == 0
               for w in written), written
    killed = replies["k"]
    assert isinstance(killed, ProcKillResponse)
    assert (killed.ok, killed.state, killed.exit_code) == (True, "stopped", -15)
