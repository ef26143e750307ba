"""A WebSocket host of your own: :func:`open_ws_server` (:class:`WsServer`) and
:func:`serve_ws` (a server and a client connected to it).

Layer: client (anyio processes). The server is ``a2e-host serve`` in its own process.
"""

from __future__ import annotations

import re
import signal
import sys
from collections import deque
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from anyio.abc import Process

from .errors import ServerFailed, unwrap_group
from .lines import LineReader
from .processes import stop
from .session import DEFAULT_AGENT_CAPS, Client
from .websocket import connect_ws

__all__ = ["SERVE_COMMAND", "WsServer", "open_ws_server", "serve_ws"]

_LISTENING = re.compile(r"a2e-host listening on (ws://\S+)")

SERVE_COMMAND: tuple[str, ...] = (sys.executable, "-m", "a2e_host", "serve")
"""The default server command: this interpreter's ``a2e-host serve``."""


@dataclass
class WsServer:
    """A running ``a2e-host serve`` child process (:func:`open_ws_server`).

    Attributes:
        url: where it listens, e.g. ``ws://127.0.0.1:40419``.
        process: the :class:`anyio.abc.Process`.
        stderr_lines: its last 1,000 stderr lines (its log) when captured; empty when
            passed through.
        returncode: its exit status once it has stopped (0 after an orderly stop), else
            None.
    """

    url: str
    process: Process
    stderr_lines: deque[str] = field(default_factory=lambda: deque(maxlen=1000))

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def connect(self, **kwargs: Any) -> AbstractAsyncContextManager[Client]:
        """:func:`connect_ws` to this server; ``kwargs`` as for it (``agent_caps``,
        ``auth_token``, …). Use as ``async with server.connect() as client:``."""
        return connect_ws(self.url, **kwargs)


@asynccontextmanager
async def open_ws_server(
    args: Sequence[str] = (),
    *,
    command: Sequence[str] = SERVE_COMMAND,
    stderr: Literal["inherit", "capture"] = "capture",
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    start_timeout: float = 30.0,
    close_timeout: float = 15.0,
) -> AsyncIterator[WsServer]:
    """Start ``a2e-host serve`` on a free 127.0.0.1 port as a child process; stop it on exit.

    The server is the real thing — its own process, configuration and signal handling —
    so a test of an agent exercises what a deployment runs. It is started with
    ``--host 127.0.0.1 --port 0`` after ``args`` (each unless ``args`` gives it: an
    explicit ``--port P`` is honoured) and found by the line it prints once listening.
    On exit it gets SIGTERM (the orderly stop: chains in flight are given
    ``shutdown_grace`` seconds, then cancelled), then ``close_timeout`` seconds to exit,
    then SIGKILL.

    Args:
        args: ``serve`` flags, e.g. ``["--tools", "conformance", "--allow-proc", "wc"]``;
            ``--host`` / ``--port`` given here replace ``127.0.0.1`` / ``0`` (a free port).
        command: the server command; default this interpreter's ``python -m a2e_host
            serve``, so no PATH lookup is involved.
        stderr: ``capture`` keeps the server's log in :attr:`WsServer.stderr_lines`;
            ``inherit`` copies it to this process's stderr as it comes.
        cwd / env: for the child (env None = inherit; ``A2E_*`` variables apply).
        start_timeout: seconds to wait for the server to listen.
        close_timeout: seconds the server gets to exit after SIGTERM.

    Raises:
        ServerFailed: the server exited first (e.g. an unknown tool pack: its message is
            in the exception) or did not listen within ``start_timeout``.
        OSError: the command cannot be started.
    """
    import subprocess

    argv = [*command, *args]
    for flag, default in (("--host", "127.0.0.1"), ("--port", "0")):
        if not any(arg == flag or arg.startswith(f"{flag}=") for arg in args):
            argv += [flag, default]
    process = await anyio.open_process(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        cwd=cwd, env=env,
    )
    server = WsServer(url="", process=process)
    listening = anyio.Event()
    try:
        with unwrap_group():
            async with anyio.create_task_group() as tg:
                tg.start_soon(_read_server_stderr, server, stderr, listening)
                with anyio.move_on_after(start_timeout):
                    await listening.wait()
                if not server.url:
                    with anyio.move_on_after(1):
                        await process.wait()  # let the last lines of a failed start arrive
                    tail = "\n".join(list(server.stderr_lines)[-10:])
                    state = (f"exited with status {process.returncode}"
                             if process.returncode is not None
                             else f"did not listen within {start_timeout:g} s")
                    raise ServerFailed(f"the server {state}: {' '.join(argv)}"
                                       + (f"\n{tail}" if tail else ""))
                try:
                    yield server
                finally:
                    with anyio.CancelScope(shield=True):
                        await stop(process, close_timeout, signal.SIGTERM)
                    tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await stop(process, close_timeout, signal.SIGTERM)


async def _read_server_stderr(
    server: WsServer, mode: str, listening: anyio.Event
) -> None:
    """Keep the server's stderr flowing (a full pipe would block its log), note where it
    listens, and keep or copy each line."""
    assert server.process.stderr is not None
    async for text in LineReader(server.process.stderr, 1 << 20):
        if not server.url:
            match = _LISTENING.search(text)
            if match:
                server.url = match.group(1)
                listening.set()
        if mode == "inherit":
            print(text, file=sys.stderr, flush=True)
        else:
            server.stderr_lines.append(text)
    listening.set()  # the server exited: stop waiting


@asynccontextmanager
async def serve_ws(
    args: Sequence[str] = (),
    *,
    agent_caps: Sequence[str] = DEFAULT_AGENT_CAPS,
    auth_token: str = "",
    limits: dict[str, int] | None = None,
    agent_id: str = "a2e-host-client",
    command: Sequence[str] = SERVE_COMMAND,
    stderr: Literal["inherit", "capture"] = "capture",
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    start_timeout: float = 30.0,
    close_timeout: float = 15.0,
    open_timeout: float = 10.0,
) -> AsyncIterator[Client]:
    """Start a WebSocket host on a free 127.0.0.1 port and yield a client connected to it.

    :func:`open_ws_server` then :func:`connect_ws`; on exit the client closes and the
    server stops (SIGTERM). The client's :attr:`Client.url` says where the server listens
    and :attr:`Client.server` is the :class:`WsServer` (its ``returncode`` readable after
    the block)::

        async with serve_ws(["--tools", "conformance"], agent_caps=["chains"]) as client:
            async for message in client.run_chain(nodes, "a"):
                print(message)

    Args:
        args: ``serve`` flags, e.g. ``["--tools", "conformance"]``; an explicit
            ``--port P`` is honoured (see :func:`open_ws_server`).
        agent_caps / auth_token / limits / agent_id / open_timeout: see :func:`connect_ws`.
        command / stderr / cwd / env / start_timeout / close_timeout: see
            :func:`open_ws_server`.

    Raises:
        ServerFailed: the server did not start (see :func:`open_ws_server`).
        HandshakeFailed / HostError / TimeoutError / ConnectionLost: see :func:`open_client`.
    """
    async with open_ws_server(
        args, command=command, stderr=stderr, cwd=cwd, env=env, start_timeout=start_timeout,
        close_timeout=close_timeout,
    ) as server:
        async with server.connect(
            agent_caps=agent_caps, auth_token=auth_token, limits=limits, agent_id=agent_id,
            open_timeout=open_timeout,
        ) as client:
            client.server = server
            yield client
