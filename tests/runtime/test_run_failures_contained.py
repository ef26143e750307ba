"""A failure inside one run, or inside one plugin's ``handle``, stays with that request
(issue 14: runs live in the host's task group now, so what escapes a run reaches every
connection's runs, not one connection's)."""

from __future__ import annotations

import asyncio
from typing import ClassVar

import anyio
import pytest
import structlog
from a2e_chains import ChainPlugin

from a2e_host.chains.messages import ChainEvent, ChainRequest, ChainResponse
from a2e_host.config import HostConfig
from a2e_host.exceptions import InvalidMessage
from a2e_host.messages import (
    ErrorMessage,
    Message,
    Ping,
    Pong,
)
from a2e_host.plugin import Plugin, PluginContext, RunHandle
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import open_memory_client
from a2e_host.runtime.runs import Run, RunRegistry
from tests.support.memory import handshaken

WAIT = 15  # seconds: the bound on every wait

NAP = [{"node_id": "nap", "kind": "tool", "name": "sleep", "input": {"seconds": 1}}]


class Do(Message, tag="bad/do", kw_only=True):
    """Agent → host: start a job that fails."""

    TYPE: ClassVar[str] = "bad/do"


class FailingJobs(Plugin):
    """A third-party plugin whose run fails with a protocol error carrying a detail the
    encoder cannot write (a plugin bug: ``detail`` should be JSON-like)."""

    capability: ClassVar[str] = "bad"
    namespace: ClassVar[str] = "bad/*"
    priority: ClassVar[int] = 50
    message_types: ClassVar[tuple[type[Message], ...]] = (Do,)

    async def handle(self, message: Message, ctx: PluginContext) -> None:
        ctx.start_run(self._job)

    async def _job(self, run: RunHandle) -> None:
        await anyio.sleep(0.2)
        raise InvalidMessage("refused", detail={"when": object()})


@pytest.mark.asyncio
async def test_a_run_whose_error_cannot_be_sent_does_not_end_other_sessions_chains() -> None:
    """Reproduction over a real host: install a plugin like :class:`FailingJobs` (entry
    point ``a2e_host.plugins``), ``a2e-host serve --port 0 --tools conformance``; session
    B sends a 3 s ``sleep`` chain, session A sends ``bad/do``. The registry's ``_run``
    encodes the run's wire error outside any guard, the TypeError escapes into the
    host's task group, and the whole host exits 1: B's chain gets an ``error`` event, no
    ``chain/resp``, and every connection is closed 1001. (In the old core the run lived
    in A's connection task group: only A's connection failed.)"""
    host = Host(HostConfig(tools=("conformance",)), plugins=[ChainPlugin, FailingJobs])
    crashed: BaseException | None = None
    resp: Message | None = None
    try:
        with anyio.fail_after(WAIT):
            async with host.running():
                async with open_memory_client(host) as b, open_memory_client(host) as a:
                    await handshaken(b, ["chains"])
                    b.send(ChainRequest(id="innocent", nodes=NAP, entry_node="nap"))
                    start = await b.receive()
                    assert isinstance(start, ChainEvent) and start.phase == "start"
                    await handshaken(a, ["bad"])
                    a.send(Do(id="x"))
                    while not isinstance(resp, ChainResponse):
                        resp = await b.receive()
                    b.send(Ping(id="still"))
                    assert isinstance(await b.receive(), Pong)
    except anyio.EndOfStream:
        crashed = anyio.EndOfStream()
    except Exception as exc:  # the host's task group failing
        crashed = exc
    assert crashed is None, (
        f"one session's failing run took the host down ({type(crashed).__name__}: "
        f"{crashed}); the other session's chain never got its chain/resp"
    )
    assert isinstance(resp, ChainResponse) and resp.success, resp


@pytest.mark.asyncio
async def test_an_append_hook_that_fails_ends_its_run_not_every_run_of_the_host() -> None:
    """The store seam (``RunSink.append``, called before every frame is emitted): a
    store that fails (a full disk) raises inside the run; the registry then sends the
    run's error through the same sink, whose append raises again, out of ``_run`` into
    the registry's task group: every other run of the host is cancelled and
    ``runs.open()`` raises."""
    runs = RunRegistry(structlog.get_logger("test"))
    other_done = anyio.Event()
    other_cancelled = False

    def failing_store(position: int, frame: bytes) -> None:
        raise OSError(28, "No space left on device")

    async def emits(run: Run) -> None:
        await anyio.sleep(0.05)
        run.sink.send_nowait(Ping(id="one"))

    async def other(run: Run) -> None:
        nonlocal other_cancelled
        try:
            await anyio.sleep(0.5)
        except anyio.get_cancelled_exc_class():
            other_cancelled = True
            raise
        other_done.set()

    escaped: BaseException | None = None
    try:
        with anyio.fail_after(WAIT):
            async with runs.open():
                runs.start(other, key=("s2", "r2"))
                runs.start(emits, key=("s1", "r1"), append=failing_store)
                await other_done.wait()
    except Exception as exc:
        escaped = exc
    assert escaped is None and not other_cancelled, (
        f"a failing append hook of one run escaped into the host's runs "
        f"({type(escaped).__name__}: {escaped}); the other run was cancelled: "
        f"{other_cancelled}"
    )


class Cancels(Plugin):
    """A plugin whose ``handle`` awaits an asyncio future that something else cancels
    (an asyncio client library's request cancelled under it): ``handle`` raises
    ``CancelledError`` although nobody cancelled the connection."""

    capability: ClassVar[str] = "bad"
    namespace: ClassVar[str] = "bad/*"
    priority: ClassVar[int] = 50
    message_types: ClassVar[tuple[type[Message], ...]] = (Do,)

    async def handle(self, message: Message, ctx: PluginContext) -> None:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        loop.call_soon(future.cancel)
        await future


@pytest.mark.asyncio
async def test_a_plugin_handle_raising_a_stray_cancel_gets_an_error_and_the_connection_lives(
) -> None:
    """``dispatch`` promises "never raises (errors go on the wire)", but catches only
    ``Exception``: a ``CancelledError`` out of a plugin's ``handle`` that is not the
    connection's own cancellation ends the whole connection at once, logged as an
    orderly host close (``close_code=1000 closed_by=host``), with no ``error`` for the
    message, no ``pong`` for the ping behind it, and every chain of the connection
    cancelled."""
    host = Host(HostConfig(tools=("conformance",)), plugins=[ChainPlugin, Cancels])
    got: list[Message] = []
    with anyio.fail_after(WAIT):
        async with open_memory_client(host) as client:
            await handshaken(client, ["bad"])
            client.send(Do(id="x"))
            client.send(Ping(id="after"))
            try:
                while not any(isinstance(m, Pong) for m in got):
                    got.append(await client.receive())
            except anyio.EndOfStream:
                pass
    assert any(isinstance(m, Pong) for m in got), (
        f"the connection ended (close code {client.close_code}) instead of answering the "
        f"ping after the plugin's stray cancel; it got {[m.TYPE for m in got]}"
    )
    errors = [m for m in got if isinstance(m, ErrorMessage) and m.req_id == "x"]
    assert len(errors) == 1, f"expected one error for 'x', got {got}"
