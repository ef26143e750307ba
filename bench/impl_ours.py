"""The "ours" slot: a2e-host in-process, through its public in-memory connection.

API used: a :class:`a2e_host.runtime.host.Host` built once per process (``HostConfig(tools=
("bench",))``, as a running host builds its plugins once), and per request one
connection of :func:`a2e_host.transports.memory.open_memory_connection` served by
``host.serve_connection``: handshake, the ``chain/req`` bytes, then every frame the host
sends (events, *then the chain/resp*) into ``sink``, the ``chain/resp`` frame returned.
So the timed path is the one a wire request takes — decode, session checks, routing,
validation, scheduler, event encoding, the connection's outbox and writer — minus a
socket or a pipe, plus opening and closing the connection. The trailing ``chain/resp``
is dropped from the sink after the timed call (the references put only events there).
Logging is configured as the CLI does (stderr, INFO), so the host's per-connection and
per-chain log lines are part of its cost, as in production.

Until ``a2e_host`` imports, :func:`load` raises :class:`Unavailable` and the harness
reports "unavailable" for this slot.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any


class Unavailable(Exception):
    """This implementation cannot be measured here (the reason is the message)."""


Call = Callable[[bytes, Callable[[bytes], None]], Awaitable[bytes]]

HANDSHAKE = b'{"type":"handshake/req","id":"bench","agent_caps":["chains"]}'
BUFFER_FRAMES = 1024
"""Host → client frames in flight before the host's writer waits (the client reads as
fast as the sink takes them)."""


def frame_type(frame: bytes) -> bytes:
    """The ``type`` of a frame the host encoded (its first field: ``{"type":"…",``)."""
    return frame[9:frame.index(b'"', 9)]


def connection_call(host: Any) -> Call:
    """``async f(request, sink) -> response`` over a fresh in-memory connection to ``host``.

    Raises (from the call):
        AssertionError: the handshake was refused, or the host answered with an
            ``error`` instead of a ``chain/resp``.
    """
    from a2e_host.transports.memory import open_memory_connection

    async def call(request: bytes, sink: Callable[[bytes], None]) -> bytes:
        async with open_memory_connection(
            host.serve_connection, buffer_frames=BUFFER_FRAMES
        ) as client:
            client.send(HANDSHAKE)
            hello = await client.receive()
            if b'"ok":true' not in hello:
                raise AssertionError(f"handshake refused: {hello[:300]!r}")
            client.send(request)
            while True:
                frame = await client.receive()
                sink(frame)
                kind = frame_type(frame)
                if kind == b"chain/resp":
                    return frame
                if kind != b"chain/event":
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
    return connection_call(Host(HostConfig(tools=("bench",), limits=limits)))
