"""Run ``chain/req`` bytes in this process, through the ChainPlugin, into a sink.

Layer: runtime. For benchmarks and embedding: the same decode → validation → scheduler →
encode path a wire request takes, minus a transport. (``a2e-host run`` goes further and
uses a real in-memory connection, handshake included.)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
import anyio.abc
import structlog

from .chains.messages import ChainRequest, ChainResponse, chain_codec
from .codec import encode_message
from .config import HostConfig
from .exceptions import InvalidMessage
from .limits import SessionLimits
from .messages import Message, new_id

__all__ = ["InProcessHost", "run_request"]


@dataclass
class _Session:
    limits: SessionLimits
    session_id: str = field(default_factory=new_id)
    agent_id: str = "inprocess"
    granted: frozenset[str] = frozenset({"chains", "tools", "skill", "proc"})


class _SinkOutbox:
    __slots__ = ("sink", "response")

    def __init__(self, sink: Callable[[bytes], None]) -> None:
        self.sink = sink
        self.response: bytes | None = None

    def send_nowait(self, message: Message) -> None:
        data = encode_message(message)
        if isinstance(message, ChainResponse):
            self.response = data
        self.sink(data)

    async def wait_writable(self) -> None:
        return None


@dataclass
class _Context:
    session: _Session
    outbox: _SinkOutbox
    tg: anyio.abc.TaskGroup
    log: Any = field(default_factory=lambda: structlog.get_logger("a2e_host.inprocess"))
    closing: bool = False

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any, name: str = "") -> None:
        coro_fn = cast(Callable[..., Coroutine[Any, Any, Any]], fn)
        self.tg.start_soon(coro_fn, *args, name=name or None)


class InProcessHost:
    """A ChainPlugin with a fixed session, for running requests without a connection.

    Logging: when structlog is not configured yet, warnings and errors go to stderr
    (:func:`a2e_host.logs.configure_logging`); configure it first to choose otherwise.

    Args:
        config: the host configuration (tool packs in ``config.tools``).
        granted: capabilities the implicit session holds.
    """

    def __init__(self, config: HostConfig, granted: frozenset[str] | None = None) -> None:
        from a2e_chains import ChainPlugin

        if not structlog.is_configured():
            # structlog's default prints every level to stdout; an embedding application
            # that did not configure logging gets warnings and errors on stderr instead
            from .logs import configure_logging

            configure_logging("auto", "warning")
        self.config = config
        self.plugin = ChainPlugin(config)
        self.session = _Session(limits=SessionLimits(config.limits))
        if granted is not None:
            self.session.granted = granted

    async def run(self, request: bytes, sink: Callable[[bytes], None]) -> bytes:
        """Decode, validate and run one ``chain/req``; events and the response go to ``sink``.

        Returns:
            The encoded ``chain/resp``.

        Raises:
            RemoteProtocolError: the bytes are not a valid ``chain/req``.
        """
        message = chain_codec.decode(request)
        if not isinstance(message, ChainRequest):
            raise InvalidMessage(f"expected a chain/req, got {message.TYPE!r}")
        outbox = _SinkOutbox(sink)
        async with anyio.create_task_group() as tg:
            ctx = _Context(session=self.session, outbox=outbox, tg=tg)
            await self.plugin.handle(message, ctx)
        assert outbox.response is not None
        return outbox.response


async def run_request(
    request: bytes,
    *,
    tools: tuple[str, ...] | list[str] = ("bench",),
    sink: Callable[[bytes], None],
    config: HostConfig | None = None,
) -> bytes:
    """One-shot :meth:`InProcessHost.run` with the given tool packs enabled.

    Args:
        request: one ``chain/req`` as JSON bytes (``session_id`` is ignored).
        tools: tool packs to enable.
        sink: receives each encoded message (events, then the response), in order.
        config: a full configuration instead of ``tools``.

    Returns:
        The encoded ``chain/resp``.
    """
    host = InProcessHost(config or HostConfig(tools=tuple(tools)))
    return await host.run(request, sink)
