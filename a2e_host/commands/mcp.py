"""``a2e-host mcp``: offer the host's chains to MCP clients (README "Chains offered to MCP
clients"; PROTOCOL.md §12).

Layer: command. An MCP server built with the official ``mcp`` SDK's low-level server API
(``mcp.server.lowlevel.Server``; no MCP framing of our own) whose tools
(:mod:`~a2e_host.commands.mcp_tools`) run chains on an in-process
:class:`~a2e_host.runtime.host.Host` through an in-memory A2E connection, the path a wire
request takes. The session asks for every capability and gate the configuration serves
(as ``a2e-host run`` does), so what an MCP client may run is what the configuration
allows (tool packs, ``allow_proc``, skills, MCP servers as tool sources).

Transports:

* stdio (the default): MCP on stdin/stdout (the SDK's ``stdio_server``, which points fd 1
  at stderr while serving, so nothing else reaches the protocol; stdin read by a daemon
  thread); logs on stderr. It ends when stdin closes, or on SIGINT/SIGTERM.
* streamable HTTP with ``--port N`` (``0``: a free port): ``http://HOST:PORT/mcp`` on its
  own port, served by uvicorn; prints ``a2e-host mcp listening on http://HOST:PORT/mcp`` on
  stderr once listening. Not on ``serve``'s WebSocket port: the WebSocket server's HTTP
  hook answers only requests without a body, and MCP's POSTs have one.

Needs the ``mcp`` extra (``pip install 'a2e-host[mcp]'``): without it the command says
so and exits 2.
"""

from __future__ import annotations

import hmac
import os
import sys
import threading
from collections.abc import Callable, Collection
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel

from .. import __version__

__all__ = ["mcp_main"]

EXIT_USAGE = 2


def mcp_main(config_path: str | Path | None, overrides: dict[str, Any], *,
             port: int | None = None, bind: str = "127.0.0.1") -> int:
    """Serve MCP until stdin closes (stdio) or a signal.

    Args:
        config_path: a TOML file, or None.
        overrides: CLI values by :class:`~a2e_host.config.HostConfig` field name.
        port: serve streamable HTTP on this TCP port (0: a free one) instead of stdio.
        bind: the address HTTP listens on.

    Returns:
        The exit code: 0, or 2 when the ``mcp`` package is missing or the configuration
        is bad.
    """
    try:
        import mcp.server.lowlevel  # noqa: F401
    except ImportError:
        print("a2e-host mcp: the 'mcp' package is not installed; install it with "
              "pip install 'a2e-host[mcp]'", file=sys.stderr)
        return EXIT_USAGE
    from .serve import _host, _setup

    config = _setup(config_path, overrides, auto_level="warning")
    if port is not None and not config.auth_required and not _loopback(bind):
        print(f"a2e-host mcp: --host {bind} serves chains to the network with no "
              "authentication; configure auth_token (or [auth.tokens]) so clients must send "
              "Authorization: Bearer, or listen on 127.0.0.1", file=sys.stderr)
        return EXIT_USAGE
    host = _host(config, None)
    anyio.run(_serve, host, port, bind, backend="asyncio")
    return 0


def _loopback(bind: str) -> bool:
    """Whether ``bind`` names only this machine (``localhost`` or a loopback address)."""
    import ipaddress

    if bind.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind.strip("[]")).is_loopback
    except ValueError:
        return False


def _tokens(config: Any) -> dict[str, str]:
    """Every configured token → the principal that presents it."""
    from ..config import TOKEN_PRINCIPAL

    found = {token: principal for principal, token in config.auth_tokens.items() if token}
    if config.auth_token:
        found[config.auth_token] = TOKEN_PRINCIPAL
    return found


def bearer_of(headers: Any) -> str:
    """The token of an ``Authorization: Bearer <token>`` header (``""``: none)."""
    value = headers.get("authorization", "") if headers is not None else ""
    scheme, _, token = str(value).partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def match_token(presented: str, tokens: Collection[str]) -> str:
    """The configured token ``presented`` equals (constant time per token), or ``""``."""
    found = ""
    for token in tokens:
        if hmac.compare_digest(presented.encode(), token.encode()):
            found = token
    return found


async def _serve(host: Any, port: int | None, bind: str) -> None:
    from mcp.server.stdio import stdio_server

    try:
        if port is not None:
            tokens = list(_tokens(host.config))
            await _with_host(host, lambda server, stop: _serve_http(server, bind, port, stop,
                                                                    tokens))
            return
        lines = _StdinLines(host.config.limits.max_message_bytes)
        with anyio.CancelScope() as served:
            async with stdio_server(stdin=lines) as (read, write):  # type: ignore[arg-type]
                async def over_stdio(server: Any, stop: _Stop) -> None:
                    await server.run(read, write, server.create_initialization_options())

                await _with_host(host, over_stdio)
                served.cancel()  # a signal ended it: stop reading stdin too
    finally:
        with anyio.CancelScope(shield=True):
            await host.aclose()


class _StdinLines:
    """stdin's lines for the SDK's ``stdio_server``, read by a daemon thread: a signal
    stops the server while stdin stays open (a worker thread blocked in ``readline``
    would hold up both the cancellation and the process's exit).

    Args:
        max_line_bytes: the longest line read as one (a longer one arrives cut, and the
            SDK answers it with a parse error).
    """

    def __init__(self, max_line_bytes: int) -> None:
        self._max = max_line_bytes
        self._send, self._receive = anyio.create_memory_object_stream[str](0)
        self._token: Any = None

    def __aiter__(self) -> _StdinLines:
        if self._token is None:
            self._token = anyio.lowlevel.current_token()
            threading.Thread(target=self._read, name="mcp-stdin", daemon=True).start()
        return self

    async def __anext__(self) -> str:
        try:
            return await self._receive.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    def _read(self) -> None:
        # os.read on fd 0, not sys.stdin: a daemon thread blocked inside a buffered
        # reader's lock aborts the interpreter at exit
        pending = b""
        try:
            while chunk := os.read(0, 65536):
                pending += chunk
                while (end := pending.find(b"\n")) >= 0 or len(pending) >= self._max:
                    cut = end + 1 if 0 <= end < self._max else self._max
                    line, pending = pending[:cut], pending[cut:]
                    anyio.from_thread.run(self._send.send, line.decode("utf-8", "replace"),
                                          token=self._token)
            if pending:
                anyio.from_thread.run(self._send.send, pending.decode("utf-8", "replace"),
                                      token=self._token)
            anyio.from_thread.run_sync(self._send.close, token=self._token)
        except (OSError, RuntimeError, anyio.BrokenResourceError, anyio.ClosedResourceError):
            return  # the loop or the server is gone: nobody reads any more


class _Stop:
    """What a signal does: cancel the serving (stdio), or what the transport sets
    (HTTP: uvicorn's graceful stop)."""

    def __init__(self, scope: anyio.CancelScope) -> None:
        self.fn: Callable[[], None] = scope.cancel

    def __call__(self) -> None:
        self.fn()


async def _with_host(host: Any, serve: Any) -> None:
    """Run the host, connect to it, build the MCP server, and ``await serve(server,
    stop)`` until it returns or a signal comes (``stop()`` is called then)."""
    from ..client import connect_memory
    from .common import local_capabilities
    from .mcp_tools import ChainTools

    granted = local_capabilities(host)
    tokens = _tokens(host.config)
    async with host.running(), anyio.create_task_group() as tg, AsyncExitStack() as stack:
        stop = _Stop(tg.cancel_scope)
        tg.start_soon(_stop_on_signals, stop)
        # one A2E session per configured token: an HTTP request runs as the principal
        # whose token it presented (stdio: the operator's own process, the first token)
        by_token: dict[str, Any] = {}
        for token in tokens or {"": ""}:
            by_token[token] = await stack.enter_async_context(connect_memory(
                host, agent_id="a2e-host mcp", agent_caps=granted, auth_token=token))
        first = next(iter(by_token.values()))
        skills = await _active_skills(first)
        tools = {token: ChainTools(client, host, skills, frozenset(granted))
                 for token, client in by_token.items()}
        server = _server(tools, host.config.auth_token if host.config.auth_token in tools
                         else next(iter(tools)))
        await serve(server, stop)
        tg.cancel_scope.cancel()


async def _stop_on_signals(stop: _Stop) -> None:
    from .signals import stop_signals

    with stop_signals() as signals:
        async for _ in signals:
            stop()


async def _active_skills(client: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """The active skills (one entry per name): ``(name, description, input_schema)``."""
    if "skill" not in client.accepted_caps:
        return []
    found: dict[str, tuple[str, str, dict[str, Any]]] = {}
    for skill in await client.discover_skills():
        if skill.lifecycle == "active":
            found.setdefault(skill.name, (skill.name, skill.description, skill.input_schema))
    return [found[name] for name in sorted(found)]


def _server(by_token: dict[str, Any], default: str) -> Any:
    """The MCP server whose tools are :class:`~a2e_host.commands.mcp_tools.ChainTools`:
    ``by_token`` the tools of each configured token's session (HTTP picks the one whose
    token the request presented, checked already by :func:`require_bearer`), ``default``
    the token used over stdio."""
    from mcp.server.lowlevel import Server
    from mcp.types import ListToolsResult

    def tools_of(ctx: Any) -> Any:
        request = getattr(ctx, "request", None)
        if request is None or not hasattr(request, "headers"):
            return by_token[default]
        if len(by_token) == 1 and "" in by_token:
            return by_token[""]  # no token configured
        token = match_token(bearer_of(request.headers), by_token)
        if not token:  # pragma: no cover - require_bearer answered 401 already
            raise PermissionError("Authorization: Bearer <token> is required")
        return by_token[token]

    async def list_tools(ctx: Any, params: Any) -> Any:
        return ListToolsResult(tools=tools_of(ctx).list())

    async def call_tool(ctx: Any, params: Any) -> Any:
        # over HTTP, the request that carried the call: a client that went away (killed,
        # network gone) sends no notifications/cancelled, its connection just closes
        gone = getattr(getattr(ctx, "request", None), "is_disconnected", None)
        return await tools_of(ctx).call(params.name, dict(params.arguments or {}),
                                        ctx.session.report_progress, client_gone=gone)

    return Server("a2e-host", version=__version__, on_list_tools=list_tools,
                  on_call_tool=call_tool,
                  instructions="Run A2E chains (DAGs of tool, skill, proc, branch and map "
                               "nodes) with run_chain; check one with validate_chain.")


def require_bearer(app: Any, tokens: Collection[str]) -> Any:
    """An ASGI app answering HTTP requests to ``app`` that present none of ``tokens`` as
    ``Authorization: Bearer <token>`` with 401 and a one-line JSON reason."""
    import json

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope.get("type") != "http":
            await app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        if match_token(bearer_of(headers), tokens):
            await app(scope, receive, send)
            return
        body = json.dumps({"error": "unauthorized", "message":
                           "send this host's token as Authorization: Bearer <token>"}).encode()
        await send({"type": "http.response.start", "status": 401, "headers": [
            (b"content-type", b"application/json"),
            (b"www-authenticate", b'Bearer realm="a2e-host mcp"'),
            (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    return guarded


async def _serve_http(server: Any, bind: str, port: int, stop: _Stop,
                      tokens: Collection[str] = ()) -> None:
    import uvicorn

    app = server.streamable_http_app(host=bind)
    if tokens:
        app = require_bearer(app, tokens)
    config = uvicorn.Config(app, host=bind, port=port, log_level="warning", lifespan="on")
    web = uvicorn.Server(config)

    def graceful() -> None:
        web.should_exit = True

    stop.fn = graceful  # uvicorn sees the signal too; both only ask it to stop

    async def announce() -> None:
        while not web.started:  # noqa: ASYNC110 - uvicorn sets a flag, it has no event
            await anyio.sleep(0.05)
        sockname = web.servers[0].sockets[0].getsockname()
        shown = f"[{sockname[0]}]" if ":" in sockname[0] else sockname[0]
        print(f"a2e-host mcp listening on http://{shown}:{sockname[1]}/mcp",
              file=sys.stderr, flush=True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(announce)
        try:
            await web.serve()
        finally:
            tg.cancel_scope.cancel()
