"""The real ``a2e-host stdio`` as a subprocess (PROTOCOL.md §1): started, handshaken, and
stopped the way an agent stops it, by closing its stdin."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio

from tests.support import REPO
from tests.support.process import CLI, HostProcess, host_env, open_host

STDIO = [*CLI, "stdio", "--tools", "conformance"]


class Client:
    """One stdio host with a done handshake; reads replies, keeping chain events apart."""

    def __init__(self, host: HostProcess, handshake: dict[str, Any]) -> None:
        self.host = host
        self.handshake = handshake

    async def send(self, *lines: bytes | dict[str, Any]) -> None:
        await self.host.send(*lines)

    async def reply(self) -> dict[str, Any]:
        """The next message that is not a ``chain/event``."""
        while True:
            message = await self.host.receive()
            if message["type"] != "chain/event":
                return message

    async def run(self, message: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """Send one request; return its events and the reply that ends it."""
        await self.send(message)
        events = []
        while True:
            got = await self.host.receive()
            if got["type"] == "chain/event":
                assert got["req_id"] == message["id"], f"event of another request: {got}"
                events.append(got)
            else:
                assert got.get("req_id") == message["id"], f"reply to another request: {got}"
                return events, got

    async def assert_alive(self, tag: str) -> None:
        await self.send({"type": "ping", "id": tag})
        pong = await self.reply()
        assert (pong["type"], pong["req_id"]) == ("pong", tag), f"no pong after {tag}: {pong}"


@asynccontextmanager
async def stdio_process(argv: list[str], **env: str) -> AsyncIterator[HostProcess]:
    """Start ``argv`` (a stdio host; ``env`` as :func:`~tests.support.process.open_host`
    takes it) with its stderr collected, and yield it. Then close its stdin: it must write
    only whole JSON objects to stdout until it closes it, and exit 0 without a traceback."""
    async with anyio.create_task_group() as tg:
        host = await open_host(argv, **env)
        tg.start_soon(host.collect_stderr)
        try:
            yield host
        finally:
            assert host.process.stdin is not None
            await host.process.stdin.aclose()
            rest = await host.read_rest()
            code = await host.wait()
            tg.cancel_scope.cancel()
    for line in rest.splitlines():
        assert isinstance(json.loads(line), dict), f"stdout line is not a message: {line!r}"
    assert code == 0, host.stderr[-2000:]
    assert b"Traceback" not in host.stderr, host.stderr[-4000:].decode("utf-8", "replace")


async def handshake(
    host: HostProcess, caps: tuple[str, ...] | list[str] = ("chains",), **limits: int
) -> dict[str, Any]:
    """Send a ``handshake/req`` asking ``caps`` (and ``limits``); the accepting response."""
    hello: dict[str, Any] = {"type": "handshake/req", "id": "h", "agent_caps": list(caps)}
    if limits:
        hello["limits"] = limits
    await host.send(hello)
    resp = await host.receive()
    assert resp["type"] == "handshake/resp" and resp["ok"], resp
    return resp


@asynccontextmanager
async def stdio_host(
    *, argv: list[str] | None = None, caps: tuple[str, ...] = ("chains",), **limits: int
) -> AsyncIterator[Client]:
    """Start the real CLI (``argv``, default :data:`STDIO`), handshake asking ``caps`` and
    ``limits``, yield; then EOF, as :func:`stdio_process` ends it."""
    async with stdio_process(argv or STDIO) as host:
        yield Client(host, await handshake(host, caps, **limits))


@asynccontextmanager
async def shared_stdio_host(
    folder: Path, *, argv: list[str] | None = None, caps: tuple[str, ...] = ("chains",)
) -> AsyncIterator[Client]:
    """:func:`stdio_host` for a module-scoped fixture, one host for the module's tests (each
    sends its own requests and reads their replies): no task spans the yield, so it may
    be entered and left in different tasks of the module's event loop; stderr goes to
    ``folder/stderr`` instead of a pipe read by a task. Ends as :func:`stdio_process`
    does: stdin closed, only whole JSON objects after, exit 0 without a traceback."""
    log = folder / "stderr"
    with log.open("wb") as stderr:
        process = await anyio.open_process(
            argv or STDIO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
            cwd=REPO, env=host_env(),
        )
    host = HostProcess(process)
    try:
        yield Client(host, await handshake(host, caps))
    finally:
        assert process.stdin is not None
        await process.stdin.aclose()
        rest = await host.read_rest()
        code = await host.wait()
    errors = log.read_bytes()
    for line in rest.splitlines():
        assert isinstance(json.loads(line), dict), f"stdout line is not a message: {line!r}"
    assert code == 0, errors[-2000:]
    assert b"Traceback" not in errors, errors[-4000:].decode("utf-8", "replace")
