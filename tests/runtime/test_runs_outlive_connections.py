"""Runs belong to the host, not to the connection that started them (issue 14, item 3),
checked through a real :class:`~a2e_host.runtime.host.Host` and its connections, not the
registry alone.

A run whose policy keeps it on detach must outlive the connection that started it: the
connection ends (``serve_connection`` returns) while the run's task goes on in the host's
task group, and a second connection that attaches to it gets the rest of its frames. Were
the run's task in the connection's task group, the first connection's end would cancel it
(or the connection would not end), and these tests would fail. For a chain, the frames a
second connection gets continue the run's ``seq``, and the sink's position is that ``seq``
(what a store appending before emit, and a re-attach ``after=``, rely on).
"""

from __future__ import annotations

from typing import Any, ClassVar

import anyio
import pytest
from a2e_chains import ChainPlugin

from a2e_host.chains.messages import ChainEvent, ChainRequest, ChainResponse, chain_codec
from a2e_host.chains.toolbox import Toolbox
from a2e_host.config import HostConfig
from a2e_host.messages import Message
from a2e_host.plugin import Plugin, PluginContext
from a2e_host.runtime.host import Host
from a2e_host.runtime.memory import open_memory_client
from a2e_host.runtime.runs import DetachPolicy, Run
from a2e_host.tools import ToolRegistry, tool
from tests.support.memory import handshaken

WAIT = 10  # seconds: the bound on every wait


class TickStart(Message, tag="tick/start", kw_only=True):
    TYPE: ClassVar[str] = "tick/start"
    count: int


class Tick(Message, tag="tick/tick", kw_only=True):
    TYPE: ClassVar[str] = "tick/tick"
    FROM_HOST: ClassVar[bool] = True
    req_id: str = ""
    n: int = 0


class TickPlugin(Plugin):
    """Starts a run per ``tick/start`` that sends one ``tick/tick`` per step the test allows."""

    capability: ClassVar[str] = "ticks"
    namespace: ClassVar[str] = "tick/*"
    message_types: ClassVar[tuple[type[Message], ...]] = (TickStart, Tick)

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.go = [anyio.Event() for _ in range(3)]
        self.sent = [anyio.Event() for _ in range(3)]
        self.cancelled = anyio.Event()

    async def handle(self, message: Message, ctx: PluginContext) -> None:
        assert isinstance(message, TickStart)
        ctx.start_run(self._run, message, name=f"ticks {message.id}")

    async def _run(self, run: Run, message: TickStart) -> None:
        try:
            for n in range(1, message.count + 1):
                await self.go[n - 1].wait()
                run.sink.send_nowait(Tick(req_id=message.id, n=n))
                self.sent[n - 1].set()
        except anyio.get_cancelled_exc_class():
            self.cancelled.set()
            raise

    async def step(self, n: int) -> None:
        self.go[n - 1].set()
        await self.sent[n - 1].wait()


@pytest.mark.asyncio
async def test_a_kept_run_outlives_its_connection_and_a_second_connection_gets_the_rest(
) -> None:
    plugin = TickPlugin(HostConfig())
    host = Host(HostConfig(), plugins=[plugin])
    with anyio.fail_after(WAIT):
        async with host.running():
            async with open_memory_client(host) as first:
                await handshaken(first, ["ticks"])
                first.send(TickStart(id="t", count=3))
                await plugin.step(1)
                tick = await first.receive()
                assert isinstance(tick, Tick) and (tick.req_id, tick.n) == ("t", 1)
                [run] = list(host.runs)
                run.policy = DetachPolicy.KEEP
            # the first connection has ended (its serve_connection returned) ...
            assert host.connections == set()
            # ... and the run goes on in the host, detached, not cancelled
            assert not run.done.is_set() and not plugin.cancelled.is_set()
            assert list(host.runs) == [run] and not run.sink.attached
            await plugin.step(2)  # emitted while detached: counted, sent nowhere
            assert run.sink.position == 2

            async with open_memory_client(host) as second:
                await handshaken(second, ["ticks"])
                [conn] = host.connections
                run.attach(conn.outbox, after=2)
                await plugin.step(3)
                tick = await second.receive()
                assert isinstance(tick, Tick) and (tick.req_id, tick.n) == ("t", 3)
                await run.done.wait()
            assert not plugin.cancelled.is_set()
            assert (len(host.runs), host.runs.listed) == (0, 0)


@pytest.mark.asyncio
async def test_a_detached_kept_run_is_cancelled_and_awaited_when_the_host_stops() -> None:
    plugin = TickPlugin(HostConfig())
    host = Host(HostConfig(), plugins=[plugin])
    with anyio.fail_after(WAIT):
        async with host.running():
            async with open_memory_client(host) as client:
                await handshaken(client, ["ticks"])
                client.send(TickStart(id="t", count=3))
                await plugin.step(1)
                await client.receive()
                [run] = list(host.runs)
                run.policy = DetachPolicy.KEEP
            assert not run.done.is_set()
        # leaving host.running() cancels what is still alive, and waits for it
        assert run.done.is_set() and plugin.cancelled.is_set()
        assert len(host.runs) == 0


@pytest.mark.asyncio
async def test_a_chain_reattached_to_a_second_connection_continues_its_seq() -> None:
    gate = anyio.Event()

    @tool(blocking=False)
    async def wait_gate() -> dict[str, Any]:
        """Waits until the test opens the gate."""
        await gate.wait()
        return {"opened": True}

    @tool(blocking=False)
    async def echo(v: int = 0) -> dict[str, Any]:
        """Returns its input."""
        return {"v": v}

    config = HostConfig()
    toolbox = Toolbox(ToolRegistry([wait_gate, echo]))
    host = Host(config, plugins=[ChainPlugin(config, toolbox=toolbox)])
    nodes = [
        {"node_id": "a", "kind": "tool", "name": "echo", "input": {"v": 1}, "next_node": "g"},
        {"node_id": "g", "kind": "tool", "name": "wait_gate", "next_node": "b"},
        {"node_id": "b", "kind": "tool", "name": "echo", "input": {"v": 2}},
    ]
    appended: list[tuple[int, int | None]] = []  # position, the frame's seq (None: resp)

    def append(position: int, frame: bytes) -> None:
        message = chain_codec.decode(frame)
        appended.append((position, message.seq if isinstance(message, ChainEvent) else None))

    with anyio.fail_after(WAIT):
        async with host.running():
            async with open_memory_client(host) as first:
                await handshaken(first, ["chains"])
                first.send(ChainRequest(id="long", nodes=nodes, entry_node="a"))
                seen = [await first.receive() for _ in range(3)]  # a start, a done, g start
                assert [(m.node_id, m.phase, m.seq) for m in seen
                        if isinstance(m, ChainEvent)] == [("a", "start", 1), ("a", "done", 2),
                                                          ("g", "start", 3)]
                [run] = list(host.runs)
                assert run.sink.position == 3  # the sink's position is the chain's seq
                run.policy = DetachPolicy.KEEP
                run.sink.append = append
            assert not run.done.is_set()  # the chain waits in g, with no connection

            async with open_memory_client(host) as second:
                await handshaken(second, ["chains"])
                [conn] = host.connections
                run.attach(conn.outbox, after=3)
                gate.set()
                rest = [await second.receive() for _ in range(4)]
            await run.done.wait()
    events = [(m.node_id, m.phase, m.seq) for m in rest if isinstance(m, ChainEvent)]
    assert events == [("g", "done", 4), ("b", "start", 5), ("b", "done", 6)]
    response = rest[-1]
    assert isinstance(response, ChainResponse) and response.success, response
    assert response.req_id == "long" and response.nodes_run == 3
    # every frame was appended before it left, with its position equal to its seq
    assert appended == [(4, 4), (5, 5), (6, 6), (7, None)]
