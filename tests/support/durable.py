"""An in-process host with a run store, for durable-run tests (PROTOCOL.md §5 Durable
runs), and a gate tool a test opens when it decides."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from a2e_chains import ChainPlugin, RunsPlugin

from a2e_host.chains.messages import ChainEvent, ChainResponse
from a2e_host.chains.toolbox import Toolbox
from a2e_host.config import HostConfig
from a2e_host.messages import ErrorMessage, HandshakeRequest, HandshakeResponse, Message
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import open_memory_client
from a2e_host.store import open_store
from a2e_host.tools import Tool, tool
from a2e_host.tools.registry import ToolRegistry

WAIT = 20
"""Seconds an in-process durable test may take at most (a bound against a hang)."""

SERVE_CONFORMANCE = [sys.executable, "-m", "a2e_host", "serve", "--port", "0",
                     "--tools", "conformance"]
"""``a2e-host serve`` on a free port with the conformance tools (add ``--store PATH``)."""


class Gates:
    """Named :class:`anyio.Event` gates; the ``wait_gate`` tool waits on one."""

    def __init__(self) -> None:
        self.events: dict[str, anyio.Event] = {}
        self.entered: dict[str, anyio.Event] = {}

    def gate(self, name: str) -> anyio.Event:
        return self.events.setdefault(name, anyio.Event())

    def reached(self, name: str) -> anyio.Event:
        return self.entered.setdefault(name, anyio.Event())

    def tools(self) -> list[Tool]:
        gates = self

        @tool(blocking=False)
        async def wait_gate(name: str) -> dict[str, Any]:
            """Waits until the test opens gate ``name``."""
            gates.reached(name).set()
            await gates.gate(name).wait()
            return {"opened": name}

        @tool(blocking=False)
        async def echo(v: int = 0) -> dict[str, Any]:
            """Returns its input."""
            return {"v": v}

        @tool(blocking=False)
        async def fail(message: str = "boom") -> dict[str, Any]:
            """Always fails."""
            raise ValueError(message)

        return [wait_gate, echo, fail]


@asynccontextmanager
async def durable_host(
    path: Path, gates: Gates, *, config: HostConfig | None = None, store: bool = True,
    commit_delay: float = 0.0, wrap: Callable[[Any], Any] | None = None,
) -> AsyncIterator[Host]:
    """A running in-process host with the chains and runs plugins over ``gates``' tools
    and a SQLite run store at ``path`` (none when ``store`` is false) whose writer waits
    ``commit_delay`` seconds before committing a batch; ``wrap(store)`` is what the
    plugins get instead of the store, when given."""
    config = config or HostConfig()
    toolbox = Toolbox(ToolRegistry(gates.tools()))
    plugins = [ChainPlugin(config, toolbox=toolbox), RunsPlugin(config)]
    opened = await open_store(str(path), commit_delay=commit_delay) if store else None
    try:
        for plugin in plugins:
            plugin.store = opened if wrap is None or opened is None else wrap(opened)
        host = Host(config, plugins=plugins)
        async with host.running():
            yield host
    finally:
        if opened is not None:
            await opened.aclose()


async def handshake_as(client: Any, token: str = "",
                       caps: Sequence[str] = ("chains", "runs")) -> str:
    """Handshake ``client`` with ``token``; assert it succeeded; its session id."""
    client.send(HandshakeRequest(agent_caps=list(caps), auth_token=token))
    resp = await client.receive()
    assert isinstance(resp, HandshakeResponse) and resp.ok, resp
    return resp.session_id


GATED = [
    {"node_id": "a", "kind": "tool", "name": "echo", "input": {"v": 1}, "next_node": "g"},
    {"node_id": "g", "kind": "tool", "name": "wait_gate", "input": {"name": "g"},
     "next_node": "b"},
    {"node_id": "b", "kind": "tool", "name": "echo", "input": {"v": 2}},
]
"""a → g (waits on gate ``g``) → b: 6 events and a response."""


@asynccontextmanager
async def durable_session(
    path: Path, gates: Gates, *, config: HostConfig | None = None, token: str = "",
) -> AsyncIterator[tuple[Host, Any]]:
    """:func:`durable_host` with one in-memory client handshaken (with ``token``):
    ``(host, client)``."""
    async with durable_host(path, gates, config=config) as host:
        async with open_memory_client(host) as client:
            await handshake_as(client, token)
            yield host, client


async def until_response(client: Any) -> list[Message]:
    """Receive until a ``chain/resp`` or an ``error`` (included, last)."""
    got: list[Message] = []
    while True:
        message = await client.receive()
        got.append(message)
        if isinstance(message, ChainResponse | ErrorMessage):
            return got


def events_of(messages: list[Message]) -> list[tuple[str, str, int]]:
    """``(node_id, phase, seq)`` of the ``chain/event`` messages, in order."""
    return [(m.node_id, m.phase, m.seq) for m in messages if isinstance(m, ChainEvent)]
