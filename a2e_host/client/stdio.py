"""The client over a child's stdio: :func:`spawn_stdio` (PROTOCOL.md §1, NDJSON).

Layer: client (anyio processes).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Literal

import anyio
from anyio.abc import Process

from ..codec import encode_line
from ..framing import LineTooLong
from ..messages import Message
from .codec import client_codec
from .errors import ClientError, unwrap_group
from .lines import LineReader
from .processes import reap
from .session import DEFAULT_AGENT_CAPS, Client, open_client

__all__ = ["StdioStream", "spawn_stdio"]


class StdioStream:
    """NDJSON over a child process's stdin/stdout (PROTOCOL.md §1).

    Attributes:
        process: the :class:`anyio.abc.Process`.
        stderr_lines: the child's stderr lines when captured (empty when passed through).
    """

    def __init__(self, process: Process, max_line_bytes: int) -> None:
        self.process = process
        self.stderr_lines: list[str] = []
        self._lines = None if process.stdout is None else LineReader(process.stdout, max_line_bytes)

    async def send(self, message: Message) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(encode_line(message, redact=False))

    async def receive(self) -> Message:
        assert self._lines is not None
        line = await self._lines.receive()
        if isinstance(line, LineTooLong):
            raise ClientError(
                f"the host sent a line of {line.size} bytes, over this client's "
                f"{line.limit}; raise max_line_bytes in spawn_stdio"
            )
        return client_codec.decode(line)

    async def pump_stderr(self) -> None:
        """Collect the child's stderr into :attr:`stderr_lines` until it closes."""
        if self.process.stderr is None:
            return
        async for text in LineReader(self.process.stderr, 1 << 20):
            self.stderr_lines.append(text)

    async def aclose(self) -> None:
        if self.process.stdin is not None:
            try:
                await self.process.stdin.aclose()  # EOF on stdin = client gone
            except (anyio.ClosedResourceError, anyio.BrokenResourceError, OSError):
                pass


@asynccontextmanager
async def spawn_stdio(
    argv: Sequence[str] = ("a2e-host", "stdio"),
    *,
    agent_caps: Sequence[str] = DEFAULT_AGENT_CAPS,
    auth_token: str = "",
    limits: dict[str, int] | None = None,
    agent_id: str = "a2e-host-client",
    stderr: Literal["inherit", "capture"] = "inherit",
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    handshake_timeout: float = 10.0,
    close_timeout: float = 10.0,
    max_line_bytes: int = 64 * 1024 * 1024,
) -> AsyncIterator[Client]:
    """Spawn a host speaking NDJSON on stdio (PROTOCOL.md §1) and handshake.

    On exit stdin is closed (EOF: the host sees the client gone); the process gets
    ``close_timeout`` seconds to exit, then is terminated, then killed.

    Args:
        argv: the command, e.g. ``["a2e-host", "stdio", "--tools", "conformance"]``.
        stderr: ``inherit`` passes the host's log lines through to this process's stderr;
            ``capture`` keeps them in ``client.transport.stderr_lines``.
        cwd / env: for the child (env None = inherit).
        max_line_bytes: longest incoming line accepted, bytes.
        agent_caps / auth_token / limits / agent_id / handshake_timeout: see :func:`open_client`.

    Raises:
        OSError: the command cannot be started.
        HandshakeFailed / HostError / TimeoutError / ConnectionLost: see :func:`open_client`.
    """
    import subprocess

    process = await anyio.open_process(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE if stderr == "capture" else None,
        cwd=cwd,
        env=env,
    )
    stream = StdioStream(process, max_line_bytes)
    try:
        with unwrap_group():
            async with anyio.create_task_group() as tg:
                tg.start_soon(stream.pump_stderr, name="a2e-client-stderr")
                try:
                    async with open_client(
                        stream,
                        agent_caps=agent_caps,
                        auth_token=auth_token,
                        limits=limits,
                        agent_id=agent_id,
                        handshake_timeout=handshake_timeout,
                    ) as client:
                        yield client
                finally:
                    with anyio.CancelScope(shield=True):
                        await stream.aclose()
                        await reap(process, close_timeout)
    finally:
        with anyio.CancelScope(shield=True):
            await reap(process, close_timeout)
