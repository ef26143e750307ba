"""The real ``a2e-host serve`` on a free 127.0.0.1 port, and what a websockets client reads
from it (PROTOCOL.md §1, §8)."""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from tests.support import REPO
from tests.support.process import (
    CLI,
    STARTUP,
    WAIT,
    HostProcess,
    host_env,
    open_host,
    signal_unless_reaped,
)
from tests.support.requests import chain

SERVE = [*CLI, "serve", "--port", "0", "--tools", "conformance"]
LISTENING = r"a2e-host listening on (ws://127\.0\.0\.1:\d+)"


@asynccontextmanager
async def serving_argv(
    argv: list[str], *flags: str, **env: str
) -> AsyncIterator[tuple[str, HostProcess]]:
    """Start a host on a free port: ``CLI serve *flags`` when ``argv`` is
    :data:`~tests.support.process.CLI`, else ``argv`` as it is (``flags`` unused); ``env``
    as :func:`~tests.support.process.open_host` takes it. Yield its URL and process; then
    SIGTERM it: it must exit 0 without a traceback."""
    async with anyio.create_task_group() as tg:
        host = await open_host([*argv, "serve", *flags] if argv is CLI else argv, **env)
        tg.start_soon(host.collect_stderr)
        try:
            with anyio.fail_after(STARTUP):
                found = await host.wait_stderr(LISTENING)
            yield found.group(1), host
        finally:
            # a test may have stopped it already: it may be exiting right now
            signal_unless_reaped(host.process, signal.SIGTERM)
            code = await host.wait()
            tg.cancel_scope.cancel()
    assert code == 0, host.stderr[-2000:]
    assert b"Traceback" not in host.stderr, host.stderr[-4000:].decode("utf-8", "replace")


@asynccontextmanager
async def serving(
    *flags: str, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[str, HostProcess]]:
    """:data:`SERVE` (the conformance tools) with extra ``flags`` and ``env`` variables, as
    :func:`serving_argv` runs it."""
    async with serving_argv([*SERVE, *flags], **(env or {})) as served:
        yield served


class _Listening:
    """A host process started by :func:`_listening`: its URL, what it wrote to stderr,
    and its exit status once stopped."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.url = ""
        self.said: list[bytes] = []
        self.code: int | None = None

    @property
    def stderr(self) -> bytes:
        return b"".join(self.said)


@contextmanager
def _listening(argv: list[str], env: dict[str, str] | None, start_timeout: float
               ) -> Iterator[_Listening]:
    """Start ``argv`` (a WebSocket host on a free loopback port) in the repository, its
    stderr pumped by a thread; yield once it says it listens (within ``start_timeout``
    seconds); then SIGTERM it (killed if it has not gone :data:`WAIT` seconds later)."""
    proc = subprocess.Popen(
        argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, env=env,
    )
    host = _Listening(proc)
    lines: queue.Queue[bytes] = queue.Queue()

    def pump() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            host.said.append(line)
            lines.put(line)

    pumping = threading.Thread(target=pump, daemon=True)
    pumping.start()
    try:
        while not host.url:
            line = lines.get(timeout=start_timeout)
            if match := re.search(LISTENING, line.decode("utf-8", "replace")):
                host.url = match.group(1)
        yield host
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        try:
            host.code = proc.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            proc.kill()
            host.code = proc.wait(timeout=WAIT)
        pumping.join(timeout=WAIT)
        assert proc.stderr is not None
        proc.stderr.close()


@contextmanager
def serving_sync(argv: list[str], start_timeout: float = 30.0) -> Iterator[str]:
    """For code without an event loop: start ``argv`` (a WebSocket host on a free loopback
    port) in the repository, yield its URL once it listens (within ``start_timeout``
    seconds), then terminate it (killed if it has not gone :data:`WAIT` seconds later)."""
    with _listening(argv, None, start_timeout) as host:
        yield host.url


@contextmanager
def shared_serving(argv: list[str], **env: str) -> Iterator[str]:
    """For a module-scoped fixture: one host (``argv``, a WebSocket host on a free loopback
    port, with :func:`~tests.support.process.host_env` + ``env``) that a module's tests
    reach each on connections of their own. Yield its URL once it listens; then SIGTERM
    it: it must exit 0 without a traceback, as :func:`serving_argv` checks."""
    with _listening(argv, host_env(**env), 2 * WAIT) as host:
        yield host.url
    assert host.code == 0, host.stderr[-2000:]
    assert b"Traceback" not in host.stderr, host.stderr[-4000:].decode("utf-8", "replace")


# ── one client's side ───────────────────────────────────────────────────────────


async def receive(ws: ClientConnection) -> dict[str, Any]:
    """The next text frame, which must be one JSON object (bounded by :data:`WAIT`)."""
    with anyio.fail_after(WAIT):
        data = await ws.recv()
    assert isinstance(data, str)
    message = json.loads(data)
    assert isinstance(message, dict)
    return message


async def reply(ws: ClientConnection) -> dict[str, Any]:
    """The next message that is not a ``chain/event``."""
    while True:
        message = await receive(ws)
        if message["type"] != "chain/event":
            return message


async def send(ws: ClientConnection, message: dict[str, Any] | str) -> None:
    """Send ``message``: a text frame as it is, or a dict as JSON."""
    await ws.send(message if isinstance(message, str) else json.dumps(message))


async def call(ws: ClientConnection, message: dict[str, Any]) -> dict[str, Any]:
    """Send ``message``; the next message received."""
    await ws.send(json.dumps(message))
    return await receive(ws)


async def hello(ws: ClientConnection, **limits: int) -> dict[str, Any]:
    """Handshake asking ``chains`` (and ``limits``); the accepting response."""
    message: dict[str, Any] = {"type": "handshake/req", "id": "h", "agent_caps": ["chains"]}
    if limits:
        message["limits"] = limits
    await ws.send(json.dumps(message))
    resp = await receive(ws)
    assert resp["type"] == "handshake/resp" and resp["ok"], resp
    return resp


async def wait_started(ws: ClientConnection, req_id: str) -> None:
    """The next message is ``req_id``'s first ``start`` event."""
    event = await receive(ws)
    assert (event["type"], event["req_id"], event["phase"]) == ("chain/event", req_id, "start")


async def wait_closed(ws: ClientConnection) -> int | None:
    """Read until the host closes the connection; its close code."""
    with anyio.fail_after(WAIT):
        try:
            while True:
                await ws.recv()
        except ConnectionClosed:
            pass
    return ws.close_code


def chain_frame(req_id: str, nodes: list[dict[str, Any]], **fields: Any) -> str:
    """:func:`~tests.support.requests.chain` as a text frame."""
    return json.dumps(chain(req_id, nodes, **fields))


def sleep_node(seconds: float) -> list[dict[str, Any]]:
    """Nodes of a chain that sleeps ``seconds`` (node ``s``)."""
    return [{"node_id": "s", "kind": "tool", "name": "sleep", "input": {"seconds": seconds}}]


def echo_node(value: Any) -> list[dict[str, Any]]:
    """Nodes of a chain that echoes ``{"v": value}`` (node ``e``)."""
    return [{"node_id": "e", "kind": "tool", "name": "echo", "input": {"v": value}}]
