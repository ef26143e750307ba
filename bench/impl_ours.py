"""The "ours" slot: a2e-host in-process, through its public in-memory connection.

API used: a :class:`a2e_host.runtime.host.Host` built once per process (``HostConfig(tools=
("bench",))``, as a running host builds its plugins once), and one connection of
:func:`a2e_host.transports.memory.open_memory_connection` served by
``host.serve_connection``, handshaken once, as an agent keeps its connection. Per
request: the ``chain/req`` bytes in, then every frame the host sends (events, *then the
chain/resp*) into ``sink``, the ``chain/resp`` frame returned. So the timed path is the
one a wire request takes — decode, session checks, routing, validation, scheduler, event
encoding, the connection's outbox and writer — minus a socket or a pipe, and with the
outbox's high-water mark (backpressure against a slow reader) out of reach, as the
references have none (:data:`OUTBOX_HIGH_WATER`). The trailing
``chain/resp`` is dropped from the sink after the timed call (the references put only
events there). Logging is configured as the CLI does (stderr, INFO), so the host's
per-chain log lines are part of its cost, as in production.

Until ``a2e_host`` imports, :func:`load` raises :class:`Unavailable` and the harness
reports "unavailable" for this slot.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


class Unavailable(Exception):
    """This implementation cannot be measured here (the reason is the message)."""


Call = Callable[[bytes, Callable[[bytes], None]], Awaitable[bytes]]

HANDSHAKE = b'{"type":"handshake/req","id":"bench","agent_caps":["chains"]}'
OUTBOX_HIGH_WATER = 65_536
"""Frames the connection's outbox queues before chains wait for its writer. The
in-process client is as fast as the references' sink, so, as for them, no chain ever
waits for a reader: without this, a map of 10,000 items (20,000 events produced between
two turns of the writer) would wait at the default mark (1,024) some 140 times."""

BUFFER_FRAMES = OUTBOX_HIGH_WATER
"""Host → client frames in flight before the host's writer waits: as many, for the same
reason (the client takes them all at once, as fast as the sink does)."""


EVENT = b'{"type":"chain/event",'
RESPONSE = b'{"type":"chain/resp",'
"""How the frames the host encodes begin (``type`` is always their first field)."""


def connection_call(host: Any, on_frame: Callable[[bytes], bool] | None = None) -> Call:
    """``async f(request, sink) -> response`` over an in-memory connection to ``host``.

    ``on_frame``, when given, is shown every frame that is not a ``chain/event`` (e.g. a
    durable run's ``chain/accepted``); True takes it out of the sink; False leaves it to
    be the ``chain/resp``, or else the host's unexpected answer (an AssertionError).

    One connection (and session) per event loop, opened and handshaken by the first call
    and reused by every later one, as an agent keeps its connection: a request pays for
    its own path, not for connecting. It closes when its loop's tasks are cancelled at
    the end of ``asyncio.run``.

    Raises (from the call):
        AssertionError: the handshake was refused, or the host answered with an
            ``error`` instead of a ``chain/resp``.
    """
    from a2e_host.transports.memory import MemoryClient, open_memory_connection

    opened: list[tuple[asyncio.AbstractEventLoop, MemoryClient, asyncio.Task[None]]] = []

    async def hold(ready: asyncio.Future[MemoryClient]) -> None:
        try:
            async with host.running(), open_memory_connection(
                host.serve_connection, buffer_frames=BUFFER_FRAMES
            ) as client:
                client.send(HANDSHAKE)
                hello = await client.receive()
                if b'"ok":true' not in hello:
                    raise AssertionError(f"handshake refused: {hello[:300]!r}")
                ready.set_result(client)
                await asyncio.Event().wait()  # until the loop's end cancels it
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    async def connection() -> MemoryClient:
        loop = asyncio.get_running_loop()
        if not opened or opened[0][0] is not loop:
            ready: asyncio.Future[MemoryClient] = loop.create_future()
            task = loop.create_task(hold(ready))
            opened[:] = [(loop, await ready, task)]
        return opened[0][1]

    async def call(request: bytes, sink: Callable[[bytes], None]) -> bytes:
        client = await connection()
        client.send(request)
        while True:
            for frame in await client.receive_some():
                if frame.startswith(EVENT):
                    sink(frame)
                    continue
                if on_frame is not None and on_frame(frame):
                    continue
                sink(frame)
                if frame.startswith(RESPONSE):
                    return frame  # the last frame of this request: nothing follows
                raise AssertionError(f"the host answered {frame[:300]!r}")

    return call


def load() -> Call:
    """Return ``async f(request, sink) -> response`` bound to a host with the bench pack."""
    try:
        from a2e_host.config import HostConfig
        from a2e_host.limits import Limits
        from a2e_host.runtime.host import Host
    except ImportError as exc:
        raise Unavailable(f"a2e_host not importable: {exc}") from exc
    try:
        from a2e_host.logs import configure_logging

        configure_logging("json", "info")
    except (ImportError, TypeError, ValueError):
        pass
    from bench.workloads import HOST_MAX_CONCURRENCY

    limits = Limits(max_concurrency=HOST_MAX_CONCURRENCY)
    config = HostConfig(tools=("bench",), limits=limits, outbox_high_water=OUTBOX_HIGH_WATER)
    return connection_call(Host(config))
